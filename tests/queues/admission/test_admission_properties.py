"""Properties over random small snapshots: the plan never over-commits, never breaks quota or
reservation rules, keeps gangs whole, explains every waiting job truthfully, and is
deterministic."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, defaultdict
from datetime import timedelta
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues.admission import (
    PROBE_USER,
    CapacityKind,
    MaintenanceState,
    MigSlots,
    Node,
    PendingJob,
    Plan,
    PreemptionClass,
    Quota,
    ReasonCode,
    Reservation,
    RunningJob,
    Snapshot,
    Team,
    default_probe,
    plan,
)
from queues.admission.engine import NOT_ESTIMATED
from queues.admission.testing import CAPABILITIES, GPU_CLASSES, MIG_A100, MIG_H100, NOW, queue

PROFILES = {"h100-80gb": MIG_H100, "a100-40gb": MIG_A100}
HBM = {g.name: g.spec.hbm_gb for g in GPU_CLASSES}
CAPS = {c.name: c for c in CAPABILITIES}
QUEUES = (
    queue("interactive", priority=30, max_running_jobs_per_user=2),
    queue("training", priority=20, default_runtime=timedelta(hours=8), required_topology="rack"),
    queue("research", priority=20, max_gpu_eq_per_user=Fraction(6)),
    queue(
        "batch",
        priority=10,
        preemption="graceful",
        grace_period=timedelta(minutes=5),
        may_borrow=True,
        tolerations=("dedicated",),
    ),
    queue("scavenger", priority=0, preemption="preemptible", may_borrow=True, tolerations=("*",)),
    queue("notebooks", priority=25, sharing="time-sliced"),
    queue("mig", priority=25, sharing="mig"),
    queue("inference", priority=40, reservation_only=True),
)
QUEUE_BY_NAME = {q.name: q for q in QUEUES}
TEAMS = ("nlp", "vision", "search")
TAINTS = ("dedicated=perf:NoSchedule",)  # batch tolerates it, scavenger every taint
CLASSES = ("h100-80gb", "a100-40gb", "l4-24gb")
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def node_capacity(node: Node) -> dict[str | None, int]:
    """Devices the portal may use per profile (None: whole GPUs or replicas)."""
    if node.mig:
        return {s.profile: max(0, s.total - s.outside) for s in node.mig}
    if node.time_slice_replicas > 1:
        replicas = node.time_slice_replicas
        return {None: max(0, node.gpus * replicas - math.ceil(node.outside_gpu_eq * replicas))}
    return {None: max(0, node.gpus - math.ceil(node.outside_gpu_eq))}


def device_eq(node: Node, profile: str | None) -> Fraction:
    if profile is not None:
        return PROFILES[node.gpu_class][profile]
    return Fraction(1, node.time_slice_replicas)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes: list[Node] = []
    for i in range(draw(st.integers(1, 6))):
        gpu_class = rng.choice(CLASSES)
        kind = rng.choice(["x", "x", "x", "m", "t"])
        fields: dict = {"rack": rng.choice(["r1", "r2"]), "network_domain": "d1"}
        if kind == "m" and gpu_class in PROFILES:
            profiles = sorted(PROFILES[gpu_class])
            fields["mig"] = tuple(
                MigSlots(p, rng.randint(0, 7), rng.choice([0, 0, 1])) for p in profiles[:2]
            )
        elif kind == "t":
            fields["time_slice_replicas"] = rng.choice([2, 4])
        if rng.random() < 0.15:
            fields["healthy"] = False
            fields["health_reason"] = "XID 79"
        if rng.random() < 0.15:
            fields["maintenance"] = rng.choice(
                [MaintenanceState.CORDONED, MaintenanceState.DRAINING]
            )
            fields["maintenance_until"] = rng.choice(
                [None, NOW + timedelta(hours=rng.randint(1, 5))]
            )
        if rng.random() < 0.2 and "mig" not in fields:
            fields["outside_gpu_eq"] = Fraction(rng.choice([1, 2]))
        if rng.random() < 0.15:
            fields["taints"] = rng.choice([TAINTS, (*TAINTS, "gpu-test:NoExecute")])
        if rng.random() < 0.3:  # allocatable CPU and memory (else unknown: holds any pod)
            fields["cpu_millicores"] = rng.choice([16_000, 64_000, 190_000])
            fields["memory_mib"] = rng.choice([0, 65_536, 1_000_000])
        nodes.append(Node(f"n{i}", gpu_class, rng.choice([1, 2, 4, 8]), **fields))
    teams = []
    for name in TEAMS:
        quotas = tuple(
            Quota(c, Fraction(rng.choice([0, 2, 4, 8])), Fraction(rng.choice([0, 2, 4])))
            for c in CLASSES
        )
        teams.append(Team(name, Fraction(rng.choice([1, 2])), quotas, Fraction(rng.randint(0, 50))))
    reservations = []
    for rid in range(1, rng.randint(0, 2) + 1):
        start = rng.choice([None, NOW - timedelta(hours=1), NOW + timedelta(hours=2)])
        end = None if start is None else start + timedelta(hours=rng.randint(1, 6))
        reservations.append(
            Reservation(
                rid,
                rng.choice(TEAMS),
                rng.choice(CLASSES),
                Fraction(rng.choice([1, 2, 4])),
                queue=rng.choice([None, "inference"]),
                start=start,
                end=end,
            )
        )
    running = _running(nodes, teams, rng)
    pending = [_random_job(rng, 100 + i) for i in range(draw(st.integers(0, 8)))]
    unreachable = NOW - timedelta(minutes=3) if rng.random() < 0.05 else None
    return Snapshot(
        now=NOW,
        gpu_classes=GPU_CLASSES,
        nodes=tuple(nodes),
        queues=QUEUES,
        capability_classes=CAPABILITIES,
        teams=tuple(teams),
        reservations=tuple(reservations),
        running=tuple(running),
        pending=tuple(pending),
        cluster_unreachable_since=unreachable,
    )


def _random_job(rng: random.Random, job_id: int) -> PendingJob:
    queue_name = rng.choice(list(QUEUE_BY_NAME))
    capability = rng.choice(["any-gpu", "any-40gb", "h100", "a100", "small-inference"])
    if queue_name == "mig":
        capability = rng.choice(["mig-1g", "mig-3g"])
    return PendingJob(
        id=job_id,
        queue=queue_name,
        team=rng.choice(TEAMS),
        user=rng.choice(["ann", "bob"]),
        capability=capability,
        submitted_at=NOW - timedelta(minutes=rng.randint(1, 300)),
        pods=rng.choice([1, 1, 1, 2, 3]),
        gpus_per_pod=rng.choice([1, 1, 2, 4]),
        memory_gb=rng.choice([None, 8, 20]) if queue_name == "notebooks" else None,
        runtime_limit=rng.choice([None, timedelta(minutes=30), timedelta(hours=3)]),
        priority=rng.choice([0, 0, 1]),
        cpu_millicores=rng.choice([0, 0, 1_000, 32_000, 100_000]),
        memory_mib=rng.choice([0, 4_096, 200_000]),
        # held back after roll-backs, until a moment past or to come
        not_before=NOW + timedelta(minutes=rng.choice([-5, 3, 90])) if rng.random() < 0.1 else None,
        rollbacks=1,
    )


@st.composite
def snapshots_with_probes(draw: st.DrawFn) -> Snapshot:
    """A snapshot plus 1-6 probes: queues' default jobs and random shapes, with ids that repeat
    the real pending jobs' (100, 101, …) so that mixing the two up would show."""
    snapshot = draw(snapshots())
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    probes = []
    for i in range(draw(st.integers(1, 6))):
        probe = None
        if rng.random() < 0.5:
            probe = default_probe(
                rng.choice(QUEUES),
                rng.choice(TEAMS),
                NOW,
                100 + i,
                gpu_classes=GPU_CLASSES,
                capability_classes=CAPABILITIES,
            )
        probes.append(probe or dataclasses.replace(_random_job(rng, 100 + i), user=PROBE_USER))
    return dataclasses.replace(snapshot, probes=tuple(probes))


def _running(nodes: list[Node], teams: list[Team], rng: random.Random) -> list[RunningJob]:
    """Running jobs that respect node capacity and quotas, so violations are the planner's."""
    jobs: list[RunningJob] = []
    nominal_used: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    borrowed_used: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    quotas = {(t.name, q.gpu_class): q for t in teams for q in t.quotas}
    for node in nodes:
        for profile, free in sorted(node_capacity(node).items(), key=lambda kv: str(kv[0])):
            while free > 0 and rng.random() < 0.6:
                devices = min(free, rng.choice([1, 2, 4]))
                team = rng.choice(teams).name
                eq = device_eq(node, profile) * devices
                quota = quotas[(team, node.gpu_class)]
                key = (team, node.gpu_class)
                if nominal_used[key] + eq <= quota.nominal:
                    kind, queue_name = CapacityKind.NOMINAL, "research"
                    nominal_used[key] += eq
                elif (
                    nominal_used[key] + borrowed_used[key] + eq
                    <= quota.nominal + quota.borrowing_limit
                ):
                    kind, queue_name = CapacityKind.BORROWED, rng.choice(["batch", "scavenger"])
                    borrowed_used[key] += eq
                else:
                    break
                jobs.append(
                    RunningJob(
                        id=len(jobs) + 1,
                        team=team,
                        user=rng.choice(["ann", "bob"]),
                        queue=queue_name,
                        gpu_class=node.gpu_class,
                        pods=(node.name,),
                        gpu_eq_per_pod=eq,
                        runtime_limit=timedelta(hours=rng.randint(1, 6)),
                        started_at=NOW - timedelta(minutes=rng.randint(0, 200)),
                        priority=rng.choice([0, 1]),
                        mig_profile=profile,
                        checkpoint_interval=timedelta(minutes=30),
                        capacity=kind,
                    )
                )
                free -= devices
    return jobs


# ---------------------------------------------------------------------- the final picture


def holds(
    snapshot: Snapshot, result: Plan
) -> list[tuple[str, str, str | None, int, int, Fraction, str, CapacityKind, int | None, str]]:
    """Every pod hold after the plan: (node, team, profile, devices, memory, eq, queue, kind,
    reservation, class); running jobs minus preempted ones plus admissions."""
    nodes = {n.name: n for n in snapshot.nodes}
    preempted = {p.job_id for p in result.preemptions}
    out = []
    for job in snapshot.running:
        if job.id in preempted:
            continue
        for name in job.pods:
            node = nodes[name]
            devices = int(job.gpu_eq_per_pod / device_eq(node, job.mig_profile))
            memory = job.memory_gb or 0
            out.append(
                (
                    name,
                    job.team,
                    job.mig_profile,
                    devices,
                    memory,
                    job.gpu_eq_per_pod,
                    job.queue,
                    job.capacity,
                    job.reservation_id,
                    job.gpu_class,
                )
            )
    pending = {p.id: p for p in snapshot.pending}
    for admission in result.admissions:
        job = pending[admission.job_id]
        profile = CAPS[job.capability].mig_profile
        for name in admission.nodes:
            node = nodes[name]
            eq = device_eq(node, profile) * job.gpus_per_pod
            memory = 0
            if node.time_slice_replicas > 1:
                memory = (
                    job.memory_gb
                    if job.memory_gb is not None
                    else HBM[node.gpu_class] // node.time_slice_replicas * job.gpus_per_pod
                )
            out.append(
                (
                    name,
                    job.team,
                    profile,
                    job.gpus_per_pod,
                    memory,
                    eq,
                    job.queue,
                    admission.capacity,
                    admission.reservation_id,
                    admission.gpu_class,
                )
            )
    return out


@given(snapshots())
@SETTINGS
def test_no_node_is_over_committed(snapshot: Snapshot) -> None:
    result = plan(snapshot)
    nodes = {n.name: n for n in snapshot.nodes}
    used: dict[tuple[str, str | None], int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    for name, _, profile, devices, mem, *_ in holds(snapshot, result):
        used[(name, profile)] += devices
        memory[name] += mem
    pending = {p.id: p for p in snapshot.pending}
    for admission in result.admissions:
        tolerated = set(QUEUE_BY_NAME[pending[admission.job_id].queue].tolerations)
        for name in admission.nodes:
            node = nodes[name]
            assert node.healthy and node.maintenance is MaintenanceState.NONE
            assert node.gpu_class == admission.gpu_class
            keys = {t.split(":")[0].split("=")[0] for t in node.taints}
            assert "*" in tolerated or keys <= tolerated, (name, node.taints)
    for (name, profile), devices in used.items():
        assert devices <= node_capacity(nodes[name])[profile], (name, profile)
    for name, mem in memory.items():
        node = nodes[name]
        if node.time_slice_replicas > 1:
            budget = node.gpus * HBM[node.gpu_class]
            outside = math.ceil(node.outside_gpu_eq * node.time_slice_replicas)
            assert mem + outside * (HBM[node.gpu_class] // node.time_slice_replicas) <= budget


@given(snapshots())
@SETTINGS
def test_no_node_gets_more_of_a_jobs_pods_than_its_cpu_and_memory_hold(
    snapshot: Snapshot,
) -> None:
    result = plan(snapshot)
    nodes = {n.name: n for n in snapshot.nodes}
    pending = {p.id: p for p in snapshot.pending}
    for admission in result.admissions:
        job = pending[admission.job_id]
        for name, pods in Counter(admission.nodes).items():
            node = nodes[name]
            if node.cpu_millicores:
                assert pods * job.cpu_millicores <= node.cpu_millicores, (name, job)
            if node.memory_mib:
                assert pods * job.memory_mib <= node.memory_mib, (name, job)


@given(snapshots())
@SETTINGS
def test_quotas_borrowing_and_reservations_hold(snapshot: Snapshot) -> None:
    result = plan(snapshot)
    quotas = {(t.name, q.gpu_class): q for t in snapshot.teams for q in t.quotas}
    pending = {p.id: p for p in snapshot.pending}
    reservations = {r.id: r for r in snapshot.reservations}
    nominal: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    total: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    reserved: dict[int, Fraction] = defaultdict(Fraction)
    for _, team, _, _, _, eq, _, kind, rid, gpu_class in holds(snapshot, result):
        if kind is CapacityKind.RESERVED:
            reserved[rid or 0] += eq
            continue
        total[(team, gpu_class)] += eq
        if kind is CapacityKind.NOMINAL:
            nominal[(team, gpu_class)] += eq
    for admission in result.admissions:
        job = pending[admission.job_id]
        key = (job.team, admission.gpu_class)
        queue_terms = QUEUE_BY_NAME[job.queue]
        if admission.capacity is CapacityKind.NOMINAL:
            assert nominal[key] <= quotas[key].nominal
            assert not queue_terms.reservation_only
        elif admission.capacity is CapacityKind.BORROWED:
            assert queue_terms.preemption is not PreemptionClass.NEVER and queue_terms.may_borrow
            assert total[key] <= quotas[key].nominal + quotas[key].borrowing_limit
        else:
            r = reservations[admission.reservation_id or 0]
            assert r.team == job.team and r.gpu_class == admission.gpu_class
            assert r.queue in (None, job.queue) and r.active_at(NOW)
            assert reserved[r.id] <= r.amount


@given(snapshots())
@SETTINGS
def test_reserved_capacity_goes_only_to_holders_or_preemptible_borrowers(
    snapshot: Snapshot,
) -> None:
    """New work that is neither the holder's nor preemptible borrowing leaves every active
    reservation's idle GPUs free. Preemptible borrowers admitted after it may still take them
    (lending idle reserved GPUs to them is allowed), so what they were admitted is not counted."""
    result = plan(snapshot)
    pending = {p.id: p for p in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    for gpu_class in CLASSES:
        strict = [
            a
            for a in result.admissions
            if a.gpu_class == gpu_class
            and a.capacity is not CapacityKind.RESERVED
            and not (
                a.capacity is CapacityKind.BORROWED
                and QUEUE_BY_NAME[pending[a.job_id].queue].preemption is PreemptionClass.PREEMPTIBLE
            )
        ]
        if not strict:
            continue
        capacity = Fraction(0)
        for node in snapshot.nodes:
            if (
                node.gpu_class == gpu_class
                and node.healthy
                and node.maintenance is MaintenanceState.NONE
            ):
                for profile, devices in node_capacity(node).items():
                    capacity += devices * device_eq(node, profile)
        used = Fraction(0)
        reserved_use: dict[int, Fraction] = defaultdict(Fraction)
        for name, _, _, _, _, eq, _, kind, rid, cls in holds(snapshot, result):
            node = nodes[name]
            if (
                cls != gpu_class
                or not node.healthy
                or node.maintenance is not MaintenanceState.NONE
            ):
                continue
            used += eq
            if kind is CapacityKind.RESERVED and rid is not None:
                reserved_use[rid] += eq
        lent = sum(
            (
                a.gpu_eq
                for a in result.admissions
                if a.gpu_class == gpu_class
                and a.capacity is CapacityKind.BORROWED
                and a not in strict
            ),
            Fraction(0),
        )
        # a team's own idle reservation is not "someone else's" capacity for its jobs
        strict_holders = {(pending[a.job_id].team, pending[a.job_id].queue) for a in strict}
        idle = sum(
            (
                max(Fraction(0), r.amount - reserved_use[r.id])
                for r in snapshot.reservations
                if r.gpu_class == gpu_class
                and r.active_at(NOW)
                and not any(t == r.team and r.queue in (None, q) for t, q in strict_holders)
            ),
            Fraction(0),
        )
        assert used - lent + idle <= capacity or _was_already_short(snapshot, gpu_class)


def _was_already_short(snapshot: Snapshot, gpu_class: str) -> bool:
    """Running work may already sit on reserved idle capacity (preemptible borrowers); then the
    planner only must not add strict work, which the preemption test covers."""
    return any(
        j.capacity is CapacityKind.BORROWED and j.gpu_class == gpu_class for j in snapshot.running
    )


@given(snapshots())
@SETTINGS
def test_gangs_are_admitted_whole_and_every_job_is_accounted_for(snapshot: Snapshot) -> None:
    result = plan(snapshot)
    pending = {p.id: p for p in snapshot.pending}
    admitted = {a.job_id for a in result.admissions}
    waiting = [s.job_id for s in result.pending]
    assert sorted(admitted | set(waiting)) == sorted(pending)
    assert not admitted & set(waiting) and len(waiting) == len(set(waiting))
    for admission in result.admissions:
        assert len(admission.nodes) == pending[admission.job_id].pods
    for preemption in result.preemptions:
        victim = next(j for j in snapshot.running if j.id == preemption.job_id)
        assert QUEUE_BY_NAME[victim.queue].preemption is not PreemptionClass.NEVER


@given(snapshots())
@SETTINGS
def test_every_waiting_job_has_a_reason_and_a_start_not_before_now(snapshot: Snapshot) -> None:
    result = plan(snapshot)
    pending = {p.id: p for p in snapshot.pending}
    for status in result.pending:
        assert status.reasons
        start = status.estimated_start
        assert (start.at is None) == bool(start.why_unknown)
        if start.at is not None:
            assert start.at >= NOW
            held_until = pending[status.job_id].not_before
            if held_until is not None:  # held back: not before its back-off ends
                assert start.at >= held_until
        if status.preempting:
            assert start.at is not None


@given(snapshots_with_probes(), st.randoms(use_true_random=False))
@SETTINGS
def test_the_plan_is_deterministic_whatever_the_input_order(
    snapshot: Snapshot, rnd: random.Random
) -> None:
    shuffled = dataclasses.replace(
        snapshot,
        nodes=tuple(rnd.sample(snapshot.nodes, len(snapshot.nodes))),
        running=tuple(rnd.sample(snapshot.running, len(snapshot.running))),
        pending=tuple(rnd.sample(snapshot.pending, len(snapshot.pending))),
        teams=tuple(rnd.sample(snapshot.teams, len(snapshot.teams))),
        probes=tuple(rnd.sample(snapshot.probes, len(snapshot.probes))),
    )
    assert plan(shuffled).to_dict() == plan(snapshot).to_dict()


@given(snapshots_with_probes())
@SETTINGS
def test_a_plan_without_estimates_decides_and_explains_the_same(snapshot: Snapshot) -> None:
    """``estimates=False`` (a reconcile between refreshes of a long queue) changes no decision,
    position or reason's code; no probe gets an estimate, and no waiting job but one whose
    start is known without the forecast (its victims' grace, or now once the cluster answers),
    and each says why."""
    full = plan(snapshot)
    quick = plan(snapshot, estimates=False)
    assert quick.admissions == full.admissions
    assert quick.preemptions == full.preemptions
    assert quick.admitted_reasons == full.admitted_reasons
    assert quick.probe_estimates == ()
    assert [s.job_id for s in quick.pending] == [s.job_id for s in full.pending]
    for fast, slow in zip(quick.pending, full.pending, strict=True):
        assert (fast.position, fast.queue_length) == (slow.position, slow.queue_length)
        assert sorted(r.code for r in fast.reasons) == sorted(r.code for r in slow.reasons)
        if fast.estimated_start.at is not None:  # known without the forecast
            assert fast.estimated_start.at == slow.estimated_start.at
        elif slow.estimated_start.at is not None:
            assert fast.estimated_start.why_unknown == NOT_ESTIMATED
    # explaining only some jobs (the new ones, between refreshes): the same decisions, and for
    # those jobs the same statuses; the plan says it is partial
    some = {job.id for job in snapshot.pending[::2]}
    partial = plan(snapshot, estimates=False, explain=some)
    assert partial.partial and not quick.partial
    assert (partial.admissions, partial.preemptions) == (quick.admissions, quick.preemptions)
    assert partial.pending == tuple(s for s in quick.pending if s.job_id in some)


# ---------------------------------------------------------------------- probes


@given(snapshots_with_probes())
@SETTINGS
def test_probes_change_nothing_for_real_jobs(snapshot: Snapshot) -> None:
    """Admissions, preemptions and every real job's status (reasons, estimate, position) are the
    same without the probes; every probe gets an estimate, never before now."""
    result = plan(snapshot)
    without = plan(dataclasses.replace(snapshot, probes=()))
    assert dataclasses.replace(result, probe_estimates=()) == without
    assert [job_id for job_id, _ in result.probe_estimates] == sorted(p.id for p in snapshot.probes)
    for _, estimate in result.probe_estimates:
        assert (estimate.at is None) == bool(estimate.why_unknown)
        assert estimate.at is None or estimate.at >= NOW


@given(snapshots_with_probes())
@SETTINGS
def test_a_probe_starts_now_when_a_real_twin_in_its_place_would_be_admitted(
    snapshot: Snapshot,
) -> None:
    """A probe is checked at its place in plan order with the admission rules: a real job with
    its fields, submitted now, would be admitted exactly there."""
    if snapshot.cluster_unreachable_since is not None:
        return  # nothing is admitted then
    result = plan(snapshot)
    for probe in snapshot.probes:
        twin = dataclasses.replace(probe, id=10_000 + probe.id, submitted_at=NOW)
        trial = dataclasses.replace(snapshot, pending=(*snapshot.pending, twin), probes=())
        if plan(trial).admission(twin.id) is not None:
            estimate = result.probe_estimate(probe.id)
            assert estimate is not None and estimate.at == NOW, (probe, estimate)


# ---------------------------------------------------------------------- quota accounting


@st.composite
def snapshots_with_changed_quotas(draw: st.DrawFn) -> Snapshot:
    """A snapshot whose quotas changed under the running work: raised, a team's borrowed jobs
    may now run within its nominal quota (as when they were admitted while other work of the team
    ran); lowered, its work may exceed nominal + borrowing limit."""
    snapshot = draw(snapshots())
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    teams = tuple(
        dataclasses.replace(
            t,
            quotas=tuple(
                dataclasses.replace(
                    q,
                    nominal=q.nominal * Fraction(rng.choice([0, 1, 1, 2, 4]), 2),
                    borrowing_limit=q.borrowing_limit * Fraction(rng.choice([0, 2, 4]), 2),
                )
                for q in t.quotas
            ),
        )
        for t in snapshot.teams
    )
    return dataclasses.replace(snapshot, teams=teams)


def _quota_use(snapshot: Snapshot, result: Plan) -> dict[tuple[str, str], Fraction]:
    """GPU-eq of every team's nominal and borrowed jobs per class, before the plan (running)
    plus what the plan admits (an upper bound of the use at any moment of the pass)."""
    use: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for job in snapshot.running:
        if job.capacity is not CapacityKind.RESERVED:
            use[(job.team, job.gpu_class)] += job.gpu_eq
    pending = {p.id: p for p in snapshot.pending}
    for admission in result.admissions:
        if admission.capacity is not CapacityKind.RESERVED:
            use[(pending[admission.job_id].team, admission.gpu_class)] += admission.gpu_eq
    return use


@given(st.one_of(snapshots(), snapshots_with_changed_quotas()))
@SETTINGS
def test_quota_reasons_report_use_within_nominal_and_borrowing_limit(snapshot: Snapshot) -> None:
    """A QuotaExceeded reason never shows more in use than nominal, nor more borrowed than the
    borrowing limit, and its numbers leave less room than the job needs."""
    result = plan(snapshot)
    quotas = {(t.name, q.gpu_class): q for t in snapshot.teams for q in t.quotas}
    for status in result.pending:
        for reason in status.reasons:
            if reason.code is not ReasonCode.QUOTA_EXCEEDED or "nominal" not in reason.details:
                continue
            d = reason.details
            quota = quotas[(d["team"], d["gpu_class"])]
            assert (d["nominal"], d["borrowing_limit"]) == (
                quota.nominal,
                quota.borrowing_limit,
            )
            assert 0 <= d["nominal_in_use"] <= d["nominal"], reason
            assert 0 <= d["borrowed_in_use"] <= d["borrowing_limit"], reason
            assert d["borrowed_in_use"] == 0 or d["nominal_in_use"] == d["nominal"], reason
            room = d["nominal"] - d["nominal_in_use"]
            if d["queue_may_borrow"]:
                room += d["borrowing_limit"] - d["borrowed_in_use"]
            assert room < d["requested"], reason


@given(snapshots())
@SETTINGS
def test_an_admission_records_what_it_borrows_beyond_nominal(snapshot: Snapshot) -> None:
    """A borrowed job's ``borrowed_gpu_eq`` is what it adds beyond the team's nominal quota; the
    team's use beyond nominal stays within its borrowing limit."""
    result = plan(snapshot)
    quotas = {(t.name, q.gpu_class): q for t in snapshot.teams for q in t.quotas}
    pending = {p.id: p for p in snapshot.pending}
    for admission in result.admissions:
        if admission.capacity is not CapacityKind.BORROWED:
            assert admission.borrowed_gpu_eq == 0
            continue
        quota = quotas[(pending[admission.job_id].team, admission.gpu_class)]
        assert 0 <= admission.borrowed_gpu_eq <= admission.gpu_eq
        assert admission.borrowed_gpu_eq <= quota.borrowing_limit
    before: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for job in snapshot.running:
        if job.capacity is not CapacityKind.RESERVED:
            before[(job.team, job.gpu_class)] += job.gpu_eq
    final: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for _, team, _, _, _, eq, _, kind, _, gpu_class in holds(snapshot, result):
        if kind is not CapacityKind.RESERVED:
            final[(team, gpu_class)] += eq
    for key, total in final.items():
        limit = quotas[key].borrowing_limit
        if before[key] - min(before[key], quotas[key].nominal) <= limit:
            # (the random running work may already exceed it; the plan must not make it so)
            assert total - min(total, quotas[key].nominal) <= limit


@given(st.one_of(snapshots(), snapshots_with_changed_quotas()))
@settings(SETTINGS, max_examples=1000)  # cases that tell are rare: a lender short on capacity
def test_a_lender_takes_no_more_from_a_team_than_it_borrows_but_for_one_whole_job(
    snapshot: Snapshot,
) -> None:
    """A team reclaiming its nominal quota preempts another team's borrowed jobs only while that
    team uses more than its nominal quota: all of a team's jobs taken this way but one were taken
    while it still borrowed, so together they are less than what it borrowed."""
    result = plan(snapshot)
    quotas = {(t.name, q.gpu_class): q for t in snapshot.teams for q in t.quotas}
    running = {j.id: j for j in snapshot.running}
    pending = {p.id: p for p in snapshot.pending}
    use = _quota_use(snapshot, result)
    taken: dict[tuple[str, str], list[Fraction]] = defaultdict(list)
    for preemption in result.preemptions:
        victim = running[preemption.job_id]
        job = pending[preemption.for_job]
        if victim.capacity is not CapacityKind.BORROWED or "reclaims its nominal" not in (
            preemption.reason
        ):
            continue
        rank = (QUEUE_BY_NAME[job.queue].priority, job.priority)
        if (
            victim.team == job.team
            and (QUEUE_BY_NAME[victim.queue].priority, victim.priority) < rank
        ):
            continue  # the team's own lower-priority work: no lending involved
        taken[(victim.team, victim.gpu_class)].append(victim.gpu_eq)
    for key, amounts in taken.items():
        borrowed = use[key] - quotas[key].nominal
        assert sum(amounts) - max(amounts) < borrowed, (key, amounts, borrowed)


# ---------------------------------------------------------------------- the what-if check


def what_if(snapshot: Snapshot, job: PendingJob, code: ReasonCode) -> Snapshot:
    """``snapshot`` with the cause behind ``code`` removed for ``job``."""
    if code is ReasonCode.NEVER_FITS:
        # every way a job can never fit, removed at once: entitlement, user limits, taints and
        # the size or shape of the nodes
        opened = snapshot
        for cause in (
            ReasonCode.RESERVATION_WINDOW,
            ReasonCode.QUOTA_EXCEEDED,
            ReasonCode.USER_LIMIT,
        ):
            opened = what_if(opened, job, cause)
        queues = tuple(
            dataclasses.replace(q, tolerations=("*",)) if q.name == job.queue else q
            for q in opened.queues
        )
        pending = tuple(
            dataclasses.replace(p, cpu_millicores=0, memory_mib=0) if p.id == job.id else p
            for p in opened.pending
        )
        opened = dataclasses.replace(opened, queues=queues, pending=pending)
        return what_if(opened, job, ReasonCode.INSUFFICIENT_CAPACITY)
    if code is ReasonCode.CLUSTER_UNREACHABLE:
        return dataclasses.replace(snapshot, cluster_unreachable_since=None)
    if code is ReasonCode.CLUSTER_UNSCHEDULABLE:  # held back after roll-backs: the back-off ends
        pending = tuple(
            dataclasses.replace(p, not_before=None) if p.id == job.id else p
            for p in snapshot.pending
        )
        return dataclasses.replace(snapshot, pending=pending)
    if code is ReasonCode.QUOTA_EXCEEDED:
        teams = tuple(
            dataclasses.replace(
                t, quotas=tuple(dataclasses.replace(q, nominal=q.nominal + 1000) for q in t.quotas)
            )
            if t.name == job.team
            else t
            for t in snapshot.teams
        )
        reservations = tuple(
            dataclasses.replace(r, amount=r.amount + 1000) if r.team == job.team else r
            for r in snapshot.reservations
        )
        return dataclasses.replace(snapshot, teams=teams, reservations=reservations)
    if code is ReasonCode.USER_LIMIT:
        queues = tuple(
            dataclasses.replace(q, max_running_jobs_per_user=None, max_gpu_eq_per_user=None)
            for q in snapshot.queues
        )
        return dataclasses.replace(snapshot, queues=queues)
    if code is ReasonCode.RESERVED_CAPACITY:
        usable = tuple(
            r for r in snapshot.reservations if r.team == job.team and r.queue in (None, job.queue)
        )
        return dataclasses.replace(snapshot, reservations=usable)
    if code is ReasonCode.RESERVATION_WINDOW:
        reservations = [
            dataclasses.replace(r, start=None, end=None) if r.team == job.team else r
            for r in snapshot.reservations
        ]
        reservations += [
            Reservation(900 + i, job.team, c, Fraction(100), queue=job.queue)
            for i, c in enumerate(CLASSES)
        ]
        return dataclasses.replace(snapshot, reservations=tuple(reservations))
    if code is ReasonCode.UNHEALTHY:
        return dataclasses.replace(
            snapshot, nodes=tuple(dataclasses.replace(n, healthy=True) for n in snapshot.nodes)
        )
    if code is ReasonCode.MAINTENANCE:
        return dataclasses.replace(
            snapshot,
            nodes=tuple(
                dataclasses.replace(n, maintenance=MaintenanceState.NONE) for n in snapshot.nodes
            ),
        )
    if code is ReasonCode.PRIORITY:
        queues = tuple(
            dataclasses.replace(q, priority=10**6) if q.name == job.queue else q
            for q in snapshot.queues
        )
        pending = tuple(
            dataclasses.replace(p, priority=10**6) if p.id == job.id else p
            for p in snapshot.pending
        )
        return dataclasses.replace(snapshot, queues=queues, pending=pending)
    if code is ReasonCode.NO_MATCHING_GPU_CLASS:
        queues = tuple(
            dataclasses.replace(
                q, gpu_classes=(), capability_classes=(), sharing=QUEUE_BY_NAME["research"].sharing
            )
            if q.name == job.queue
            else q
            for q in snapshot.queues
        )
        pending = tuple(
            dataclasses.replace(p, capability="any-gpu", cpu_millicores=0, memory_mib=0)
            if p.id == job.id
            else p
            for p in snapshot.pending
        )
        return dataclasses.replace(snapshot, queues=queues, pending=pending)
    # capacity and shape: a big empty node of every class in every mode, in a rack of its own
    extra = []
    for gpu_class in CLASSES:
        extra.append(
            Node(f"zz-{gpu_class}-x", gpu_class, 128, rack="whatif", network_domain="whatif")
        )
        extra.append(
            Node(
                f"zz-{gpu_class}-t",
                gpu_class,
                32,
                time_slice_replicas=4,
                rack="whatif",
                network_domain="whatif",
            )
        )
        if gpu_class in PROFILES:
            slots = tuple(MigSlots(p, 128) for p in sorted(PROFILES[gpu_class]))
            extra.append(
                Node(
                    f"zz-{gpu_class}-m",
                    gpu_class,
                    64,
                    mig=slots,
                    rack="whatif",
                    network_domain="whatif",
                )
            )
    return dataclasses.replace(snapshot, nodes=snapshot.nodes + tuple(extra))


@given(snapshots())
@SETTINGS
def test_the_binding_reason_is_true(snapshot: Snapshot) -> None:
    """Remove the binding cause: the job is admitted, starts preempting, or binds on another."""
    result = plan(snapshot)
    pending = {p.id: p for p in snapshot.pending}
    for status in result.pending:
        if status.preempting:
            continue
        code = status.binding.code
        after = plan(what_if(snapshot, pending[status.job_id], code))
        if after.admission(status.job_id) is not None:
            continue
        new = after.status(status.job_id)
        assert new is not None
        assert new.preempting or new.binding.code is not code, (status.binding, new.binding)
