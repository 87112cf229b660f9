"""Hypothesis strategies that build the engine's snapshots directly, so a failing property
shrinks to a minimal cluster: the fewest nodes, teams' quotas, reservations, running and waiting
jobs that still break it.

Every part is drawn with a strategy whose simplest value is the plain case (an exclusive, healthy,
untainted node; a one-pod, one-GPU job; no reservation), so shrinking removes what does not
matter. The draws are steered to the cases that tell (``docs/admission.md``, "Testing"): running
work fills nodes and borrows from teams with little nominal quota, waiting jobs are shaped for a
node of the cluster (MIG slices of its profile, time-sliced replicas, gangs in a rack) and of
teams with nominal room, so admissions, preemptions, borrowing, backfill, reservations, gangs,
MIG and time-slicing all happen in a good share of examples. ``plan_events`` names what a plan
did and records it with ``hypothesis.event``; ``test_admission_invariants`` checks the shares.

The universe is fixed and small (the standard GPU and capability classes of
``queues.admission.testing``, the queues below, three teams), so examples stay readable.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from fractions import Fraction

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from queues.admission import (
    PROBE_USER,
    CapabilityRequest,
    CapacityKind,
    MaintenanceState,
    MigSlots,
    Node,
    PendingJob,
    Plan,
    Quota,
    Reservation,
    RunningJob,
    Snapshot,
    Team,
    default_probe,
)
from queues.admission.testing import CAPABILITIES, GPU_CLASSES, MIG_A100, MIG_H100, NOW, queue

# ---------------------------------------------------------------------- the universe

PROFILES = {"h100-80gb": MIG_H100, "a100-40gb": MIG_A100}
HBM = {g.name: g.spec.hbm_gb for g in GPU_CLASSES}
# the standard capability classes plus one for A100 slices (the standard MIG ones are H100's)
CAPABILITY_CLASSES = (*CAPABILITIES, CapabilityRequest("mig-a100-2g", mig_profile="2g.10gb"))
CAPS = {c.name: c for c in CAPABILITY_CLASSES}
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
USERS = ("ann", "bob")
TAINTS = ("dedicated=perf:NoSchedule",)  # batch tolerates it, scavenger every taint
CLASSES = ("h100-80gb", "a100-40gb", "l4-24gb")
# capability classes a job for an exclusive or time-sliced node of the class may ask for
FOR_CLASS = {
    "h100-80gb": ("h100", "any-gpu", "any-40gb"),
    "a100-40gb": ("a100", "any-40gb", "any-gpu"),
    "l4-24gb": ("any-gpu", "small-inference"),
}
FIRST_RUNNING_ID = 1
FIRST_PENDING_ID = 100

# ---------------------------------------------------------------------- example counts

# 200 examples per property in the normal run (CI); the ``slow`` profile (``make test-slow``,
# ``--hypothesis-profile=slow``, registered in tests/conftest.py) raises every property here to
# its ``max_examples`` (2,000).
EXAMPLES = max(200, settings.default.max_examples)
PROPERTIES = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Strategies are built once per set of values: hypothesis validates every new strategy object
# on its first draw, which would otherwise be most of the cost of an example.
BOOLEANS = st.booleans()


@functools.lru_cache(maxsize=4096)
def pick(values: tuple) -> st.SearchStrategy:
    """One of ``values``; shrinks towards the first."""
    return st.sampled_from(values)


@functools.cache
def ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.cache
def rarely(one_in: int) -> st.SearchStrategy[bool]:
    """True about once in ``one_in`` draws; shrinks to False."""
    return st.integers(0, one_in - 1).map(lambda x: x == one_in - 1)


# ---------------------------------------------------------------------- capacity helpers


def node_capacity(node: Node) -> dict[str | None, int]:
    """Devices the portal may use per profile (None: whole GPUs or replicas)."""
    if node.mig:
        return {s.profile: max(0, s.total - s.outside) for s in node.mig}
    if node.time_slice_replicas > 1:
        replicas = node.time_slice_replicas
        return {None: max(0, node.gpus * replicas - math.ceil(node.outside_gpu_eq * replicas))}
    return {None: max(0, node.gpus - math.ceil(node.outside_gpu_eq))}


def device_eq(node: Node, profile: str | None) -> Fraction:
    """GPU-equivalents of one device of ``node``: a slice of ``profile``, a replica, a GPU."""
    if profile is not None:
        return PROFILES[node.gpu_class][profile]
    return Fraction(1, node.time_slice_replicas)


def hbm_budget(node: Node) -> int:
    """GB of GPU memory the portal's time-sliced pods may declare on ``node``: its HBM less what
    the replicas held outside the portal claim."""
    claim = HBM[node.gpu_class] // node.time_slice_replicas
    outside = math.ceil(node.outside_gpu_eq * node.time_slice_replicas)
    return node.gpus * HBM[node.gpu_class] - outside * claim


def pod_hbm(node: Node, devices: int, memory_gb: int | None) -> int:
    """GB a time-sliced pod of ``devices`` replicas claims on ``node`` (0 elsewhere)."""
    if node.time_slice_replicas <= 1:
        return 0
    if memory_gb is not None:
        return memory_gb
    return HBM[node.gpu_class] // node.time_slice_replicas * devices


def mode_of(node: Node) -> str:
    if node.mig:
        return "mig"
    return "time-sliced" if node.time_slice_replicas > 1 else "exclusive"


# ---------------------------------------------------------------------- nodes


MODES = {
    "contended": ("exclusive",),
    "backfill": ("exclusive", "exclusive", "exclusive", "mig", "time-sliced"),
    "mig": ("mig", "exclusive", "mig"),
    "time-sliced": ("time-sliced", "exclusive", "time-sliced"),
}
DEFAULT_MODES = ("exclusive", "exclusive", "mig", "time-sliced")


@st.composite
def nodes(draw: st.DrawFn, index: int, focus: str = "mixed") -> Node:
    """One GPU node: exclusive (most), MIG-partitioned or time-sliced (mostly, when that is the
    focus); sometimes unhealthy, cordoned or draining, tainted, partly used outside the portal,
    or short of CPU and memory."""
    mode = draw(pick(MODES.get(focus, DEFAULT_MODES)))
    gpu_class = draw(pick(CLASSES[:2] if mode == "mig" else CLASSES))
    gpus = draw(pick((8, 4, 2, 1)))
    fields: dict = {
        "rack": draw(pick(("r1", "r2"))),
        "network_domain": "d1",
    }
    if mode == "mig" and gpu_class in PROFILES:
        # slices per profile that the node's GPUs can hold (each GPU is 7 sevenths)
        room = Fraction(gpus)
        slots = []
        for profile in sorted(PROFILES[gpu_class]):
            share = PROFILES[gpu_class][profile]
            wanted = draw(ints(0 if slots else 1, 7))
            total = min(wanted, int(room / share))
            room -= total * share
            outside = draw(pick((0, 0, 1)))
            slots.append(MigSlots(profile, total, min(outside, total)))
        fields["mig"] = tuple(slots)
    elif mode == "time-sliced":
        fields["time_slice_replicas"] = draw(pick((4, 2)))
    if draw(rarely(8)):
        fields["healthy"] = False
        fields["health_reason"] = "XID 79"
    if draw(rarely(8)):
        fields["maintenance"] = draw(pick((MaintenanceState.CORDONED, MaintenanceState.DRAINING)))
        fields["maintenance_until"] = draw(
            pick((None, NOW + timedelta(hours=1), NOW + timedelta(hours=5)))
        )
    if "mig" not in fields and draw(rarely(6)):
        fields["outside_gpu_eq"] = Fraction(draw(pick((1, 2))))
    if draw(rarely(8)):
        fields["taints"] = draw(pick((TAINTS, (*TAINTS, "gpu-test:NoExecute"))))
    if draw(rarely(5)):  # allocatable CPU and memory (else unknown: holds any pod)
        fields["cpu_millicores"] = draw(pick((64_000, 16_000, 190_000)))
        fields["memory_mib"] = draw(pick((0, 65_536, 1_000_000)))
    return Node(f"n{index}", gpu_class, gpus, **fields)


@st.composite
def clusters(draw: st.DrawFn, most: int = 5, focus: str = "mixed") -> tuple[Node, ...]:
    count = draw(ints(1, most))
    return tuple(draw(nodes(i, focus)) for i in range(count))


# ---------------------------------------------------------------------- teams, reservations


@st.composite
def teams(draw: st.DrawFn, focus: str = "mixed") -> tuple[Team, ...]:
    """The three teams, each with a nominal quota and a borrowing limit on every class (0 means
    the team must borrow there), a fair-share weight and recent usage. When the focus is
    contention or borrowing, the first team is a lender (a large nominal quota) and the others
    borrowers (little nominal, a large borrowing limit)."""
    built = []
    for name in TEAMS:
        nominal, limit = (8, 4, 16, 2, 0), (4, 8, 0, 2)
        if focus in ("contended", "idle"):
            lender = name == TEAMS[0]
            nominal = (16, 8) if lender else (0, 2)
            limit = (0, 4) if lender else (16, 8)
        quotas = tuple(
            Quota(
                c,
                Fraction(draw(pick(nominal))),
                Fraction(draw(pick(limit))),
            )
            for c in CLASSES
        )
        built.append(
            Team(
                name,
                Fraction(draw(pick((1, 2)))),
                quotas,
                Fraction(draw(ints(0, 50))),
            )
        )
    return tuple(built)


@st.composite
def reservations(
    draw: st.DrawFn, cluster: tuple[Node, ...], focus: str = "mixed"
) -> tuple[Reservation, ...]:
    """0-2 reservations on classes of the cluster (1-2, the first open now, when reservations
    are the focus): standing, active now, opening later or ended; for any queue of the team or
    only ``inference``."""
    classes = tuple(sorted({n.gpu_class for n in cluster}))
    built = []
    least = 1 if focus == "reserved" else 0
    for rid in range(1, draw(ints(least, 2)) + 1):
        windows = ("standing", "active", "later", "ended")
        if focus == "reserved" and rid == 1:
            windows = windows[:2]
        window = draw(pick(windows))
        start = end = None
        if window == "active":
            start, end = NOW - timedelta(hours=1), NOW + timedelta(hours=draw(ints(1, 6)))
        elif window == "later":
            start = NOW + timedelta(hours=2)
            end = start + timedelta(hours=draw(ints(1, 6)))
        elif window == "ended":
            start, end = NOW - timedelta(hours=3), NOW - timedelta(hours=1)
        built.append(
            Reservation(
                rid,
                draw(pick(TEAMS)),
                draw(pick(classes)),
                Fraction(draw(pick((2, 4, 1, 8)))),
                queue=draw(pick((None, "inference"))),
                start=start,
                end=end,
                name=f"res{rid}",
            )
        )
    return tuple(built)


# ---------------------------------------------------------------------- running work


class _Room:
    """What the running jobs drawn so far leave: devices per (node, profile), time-sliced HBM,
    each team's nominal and total quota use, each reservation's use."""

    def __init__(
        self, cluster: tuple[Node, ...], team_list: tuple[Team, ...], res: tuple[Reservation, ...]
    ) -> None:
        self.nodes = cluster
        self.free = {(n.name, p): d for n in cluster for p, d in node_capacity(n).items()}
        self.hbm = {n.name: hbm_budget(n) for n in cluster if n.time_slice_replicas > 1}
        self.quotas = {(t.name, q.gpu_class): q for t in team_list for q in t.quotas}
        self.nominal: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        self.total: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        self.reservations = res
        self.reserved: dict[int, Fraction] = defaultdict(Fraction)

    def place(
        self, first: int, pods: int, devices: int, profile: str | None, memory: int | None
    ) -> tuple[str, ...] | None:
        """Pods on nodes like node ``first`` (same class, mode, replicas), first fit from it."""
        like = self.nodes[first]
        order = self.nodes[first:] + self.nodes[:first]
        same = [
            n
            for n in order
            if n.gpu_class == like.gpu_class
            and mode_of(n) == mode_of(like)
            and n.time_slice_replicas == like.time_slice_replicas
            and (profile is None or any(s.profile == profile for s in n.mig))
        ]
        free = dict(self.free)
        hbm = dict(self.hbm)
        chosen = []
        for _ in range(pods):
            for n in same:
                need = pod_hbm(n, devices, memory)
                if free.get((n.name, profile), 0) >= devices and hbm.get(n.name, 0) >= need:
                    free[(n.name, profile)] -= devices
                    if n.name in hbm:
                        hbm[n.name] -= need
                    chosen.append(n.name)
                    break
            else:
                return None
        self.free, self.hbm = free, hbm
        return tuple(chosen)

    def entitle(
        self, team: str, queue_name: str, gpu_class: str, eq: Fraction
    ) -> tuple[CapacityKind, int | None] | None:
        """What entitles a running job as admission would have: a reservation of the team
        (active, with room), its nominal quota, or borrowing; None: nothing (not drawn)."""
        terms = QUEUE_BY_NAME[queue_name]
        for r in self.reservations:
            if (
                r.team == team
                and r.gpu_class == gpu_class
                and r.queue in (None, queue_name)
                and r.active_at(NOW)
                and self.reserved[r.id] + eq <= r.amount
            ):
                return CapacityKind.RESERVED, r.id
        if terms.reservation_only:
            return None
        key = (team, gpu_class)
        quota = self.quotas[key]
        cap = quota.nominal + quota.borrowing_limit
        if self.nominal[key] + eq <= quota.nominal and self.total[key] + eq <= cap:
            return CapacityKind.NOMINAL, None
        if terms.can_borrow and self.total[key] + eq <= cap:
            return CapacityKind.BORROWED, None
        return None

    def book(self, team: str, gpu_class: str, kind: CapacityKind, rid: int | None, eq: Fraction):
        key = (team, gpu_class)
        if kind is CapacityKind.RESERVED:
            self.reserved[rid or 0] += eq
            return
        self.total[key] += eq
        if kind is CapacityKind.NOMINAL:
            self.nominal[key] += eq


RUNNING_QUEUES = (
    "batch",
    "scavenger",
    "research",
    "batch",
    "scavenger",
    "interactive",
    "training",
    "inference",
)


@st.composite
def running_jobs(
    draw: st.DrawFn,
    cluster: tuple[Node, ...],
    team_list: tuple[Team, ...],
    res: tuple[Reservation, ...],
    focus: str = "mixed",
) -> tuple[RunningJob, ...]:
    """Running jobs whose pods fit the nodes (devices, MIG slices, replicas and declared memory)
    and whose capacity kind is what admission would have given them (reservation, nominal,
    borrowed: only graceful/preemptible queues borrow), so any over-commit is the planner's. Most
    are preemptible batch or scavenger work; some gangs over two nodes; a few stopping."""
    room = _Room(cluster, team_list, res)
    jobs: list[RunningJob] = []
    attempts = {"contended": (4, 12), "idle": (0, 2), "backfill": (2, 8)}.get(focus, (0, 8))
    for _ in range(draw(ints(*attempts))):
        first = draw(ints(0, len(cluster) - 1))
        node = cluster[first]
        profile = None
        if node.mig:
            profile = draw(pick(tuple(s.profile for s in node.mig)))
        # a size the node has room for, so most draws land and nodes fill up
        room_left = room.free.get((node.name, profile), 0)
        sizes = [d for d in (4, 2, 1, 8, 3, 16, 32) if d <= room_left] or [1]
        devices = draw(pick(tuple(sizes)))
        pods = draw(pick((1, 1, 1, 2)))
        memory = None
        if node.time_slice_replicas > 1:
            memory = draw(pick((None, 8, 20)))
        team = draw(pick(TEAMS[1:] if focus == "contended" else TEAMS))
        queue_name = draw(pick(("batch", "scavenger") if focus == "contended" else RUNNING_QUEUES))
        priority = draw(pick((0, 1)))
        started = draw(ints(0, 300))
        hours = draw(ints(1, 6))
        terminating = draw(rarely(12))
        per_pod = device_eq(node, profile) * devices
        entitled = room.entitle(team, queue_name, node.gpu_class, per_pod * pods)
        if entitled is None:
            continue
        placed = room.place(first, pods, devices, profile, memory)
        if placed is None:
            continue
        kind, rid = entitled
        room.book(team, node.gpu_class, kind, rid, per_pod * pods)
        jobs.append(
            RunningJob(
                id=FIRST_RUNNING_ID + len(jobs),
                team=team,
                user=draw(pick(USERS)),
                queue=queue_name,
                gpu_class=node.gpu_class,
                pods=placed,
                gpu_eq_per_pod=per_pod,
                runtime_limit=timedelta(minutes=5) if terminating else timedelta(hours=hours),
                started_at=NOW - timedelta(minutes=started),
                priority=priority,
                mig_profile=profile,
                memory_gb=memory,
                checkpoint_interval=timedelta(minutes=30),
                capacity=kind,
                reservation_id=rid,
                terminating=terminating,
            )
        )
    return tuple(jobs)


# ---------------------------------------------------------------------- waiting jobs

RUNTIMES = (None, timedelta(minutes=30), timedelta(hours=3))

BORROWING_QUEUES = ("batch", "scavenger", "research", "batch", "scavenger")
ENTITLED_QUEUES = ("interactive", "research", "training")
PENDING_QUEUES = (
    "interactive",
    "batch",
    "research",
    "scavenger",
    "training",
    "batch",
    "inference",
)


@st.composite
def pending_job(
    draw: st.DrawFn,
    job_id: int,
    cluster: tuple[Node, ...],
    res: tuple[Reservation, ...] = (),
    focus: str = "mixed",
) -> PendingJob:
    """A waiting job shaped for one node of the cluster (its MIG profile, time-sliced replicas
    or whole GPUs, a capability its class satisfies), of any team or of a reservation's holder
    (its class, its queue); gangs of 2-3 pods; a few held back after roll-backs."""
    if focus == "contended":  # mostly the lender, reclaiming
        team = draw(pick((TEAMS[0], TEAMS[0], *TEAMS[1:])))
    elif focus == "idle":  # mostly borrowers
        team = draw(pick((*TEAMS[1:], TEAMS[0])))
    else:
        team = draw(pick(TEAMS))
    target = cluster[draw(ints(0, len(cluster) - 1))]
    held: Reservation | None = None
    if res and (focus == "reserved" or draw(BOOLEANS)):
        held = draw(pick(res))
        team = held.team
        like = [n for n in cluster if n.gpu_class == held.gpu_class]
        target = like[draw(ints(0, len(like) - 1))] if like else target
    memory = None
    capacity = max(node_capacity(target).values(), default=0)
    if target.mig and (focus == "mig" or draw(BOOLEANS)):
        queue_name = "mig"
        capability = {"h100-80gb": "mig-1g", "a100-40gb": "mig-a100-2g"}[target.gpu_class]
        if target.gpu_class == "h100-80gb" and draw(rarely(3)):
            capability = "mig-3g"
        profile = CAPS[capability].mig_profile
        capacity = max((s.total for s in target.mig if s.profile == profile), default=0)
    elif target.time_slice_replicas > 1 and (focus == "time-sliced" or draw(BOOLEANS)):
        queue_name = "notebooks"
        capability = draw(pick(FOR_CLASS[target.gpu_class]))
        memory = draw(pick((None, 8, 20)))
    else:
        # contended: the higher-priority queues that reclaim rather than borrow
        queues = {"contended": ENTITLED_QUEUES, "idle": ("batch", "scavenger", "research")}
        queue_name = draw(pick(queues.get(focus, PENDING_QUEUES)))
        if queue_name == "inference" and held is None:
            queue_name = "interactive"  # reservation-only: for a holder only
        elif held is not None and held.queue is not None and draw(BOOLEANS):
            queue_name = held.queue
        capability = draw(pick(FOR_CLASS[target.gpu_class]))
        capacity = target.gpus
    # pods the target node's kind holds: most fit one node, some need the whole class, a few
    # can never fit
    sizes = [d for d in (1, 2, 4, 8, 3, 16) if d <= max(capacity, 1)]
    return PendingJob(
        id=job_id,
        queue=queue_name,
        team=team,
        user=draw(pick(USERS)),
        capability=capability,
        submitted_at=NOW - timedelta(minutes=draw(ints(1, 300))),
        pods=draw(pick((1, 1, 2) if focus == "contended" else (1, 1, 2, 1, 3))),
        gpus_per_pod=draw(pick(tuple(sizes))),
        memory_gb=memory,
        runtime_limit=draw(pick(RUNTIMES)),
        priority=draw(pick((0, 0, 1))),
        cpu_millicores=draw(pick((0, 0, 0, 1_000, 32_000, 100_000))),
        memory_mib=draw(pick((0, 0, 4_096, 200_000))),
        # held back after roll-backs, until a moment past or to come
        not_before=(NOW + timedelta(minutes=draw(pick((-5, 3, 90)))) if draw(rarely(10)) else None),
        rollbacks=1,
    )


# ---------------------------------------------------------------------- snapshots


# What a snapshot is steered to: "mixed" (no steer; where shrinking goes), "contended" (full
# nodes of borrowed and low-priority work, waiting jobs of queues that reclaim), "idle" (room to
# admit and borrow), "reserved" (a reservation open now), "mig" and "time-sliced" (nodes mostly
# of that kind), "backfill" (a big job blocked in front of small short ones).
FOCUS = (
    "mixed",
    "contended",
    "idle",
    "reserved",
    "mig",
    "time-sliced",
    "backfill",
    "contended",
    "contended",
    "backfill",
)


@st.composite
def snapshots(draw: st.DrawFn, most_nodes: int = 5, most_pending: int = 8) -> Snapshot:
    """A whole snapshot: nodes, teams' quotas, reservations, running and waiting jobs; the
    cluster unreachable now and then. Steered to one ``FOCUS``."""
    focus = draw(pick(FOCUS))
    cluster = draw(clusters(most_nodes, focus))
    team_list = draw(teams(focus))
    res = draw(reservations(cluster, focus))
    running = draw(running_jobs(cluster, team_list, res, focus))
    count = draw(ints(1, most_pending))
    pending = tuple(
        draw(pending_job(FIRST_PENDING_ID + i, cluster, res, focus)) for i in range(count)
    )
    if focus == "backfill" and pending:
        pending = _blocked_in_front(pending, cluster, team_list, running)
    unreachable = NOW - timedelta(minutes=3) if draw(rarely(20)) else None
    return Snapshot(
        now=NOW,
        gpu_classes=GPU_CLASSES,
        nodes=cluster,
        queues=QUEUES,
        capability_classes=CAPABILITY_CLASSES,
        teams=team_list,
        reservations=res,
        running=running,
        pending=pending,
        cluster_unreachable_since=unreachable,
    )


def _blocked_in_front(
    pending: tuple[PendingJob, ...],
    cluster: tuple[Node, ...],
    team_list: tuple[Team, ...],
    running: tuple[RunningJob, ...],
) -> tuple[PendingJob, ...]:
    """The first waiting job made one that needs a whole node of the class of a partly busy
    exclusive node (as much as its team's nominal quota allows), of a queue ahead of the others
    and of the team with the most nominal quota there; the others short batch jobs of 1-2 GPUs
    on the same class. So the first likely waits for running work to end,
    and the short ones fit before then: backfill."""
    busy = {name for job in running for name in job.pods}
    exclusive = [n for n in cluster if not n.mig and n.time_slice_replicas == 1]
    if not exclusive:
        return pending
    partly = [n for n in exclusive if n.name in busy] or exclusive
    gpu_class = partly[0].gpu_class
    size = max(n.gpus for n in exclusive if n.gpu_class == gpu_class)
    quotas = {t.name: q for t in team_list for q in t.quotas if q.gpu_class == gpu_class}
    team = max(sorted(quotas), key=lambda name: quotas[name].nominal)
    entitled = int(quotas[team].nominal)
    plain = {"cpu_millicores": 0, "memory_mib": 0, "not_before": None, "memory_gb": None}
    first, rest = pending[0], pending[1:]
    big = dataclasses.replace(
        first,
        queue="training",  # ahead of the short batch jobs, within its team's nominal quota
        team=team,
        capability=FOR_CLASS[gpu_class][0],
        pods=1,
        gpus_per_pod=max(1, min(size, entitled)),
        submitted_at=NOW - timedelta(hours=6),
        **plain,
    )
    short = tuple(
        dataclasses.replace(
            job,
            queue=job.queue if job.queue in ("batch", "scavenger") else "batch",
            capability=FOR_CLASS[gpu_class][0],
            pods=1,
            gpus_per_pod=min(job.gpus_per_pod, 2),
            runtime_limit=timedelta(minutes=20),
            **plain,
        )
        for job in rest
    )
    return (big, *short)


@st.composite
def snapshots_with_probes(draw: st.DrawFn, most_nodes: int = 5, most_pending: int = 8) -> Snapshot:
    """A snapshot plus 1-6 probes: queues' default jobs and job shapes, with ids that repeat the
    real pending jobs' (100, 101, …) so that mixing the two up would show."""
    snapshot = draw(snapshots(most_nodes, most_pending))
    probes = []
    for i in range(draw(ints(1, 6))):
        probe = None
        if draw(BOOLEANS):
            probe = default_probe(
                draw(pick(QUEUES)),
                draw(pick(TEAMS)),
                NOW,
                FIRST_PENDING_ID + i,
                gpu_classes=GPU_CLASSES,
                capability_classes=CAPABILITY_CLASSES,
            )
        if probe is None:
            job = draw(pending_job(FIRST_PENDING_ID + i, snapshot.nodes, snapshot.reservations))
            probe = dataclasses.replace(job, user=PROBE_USER)
        probes.append(probe)
    return dataclasses.replace(snapshot, probes=tuple(probes))


@st.composite
def snapshots_with_changed_quotas(draw: st.DrawFn) -> Snapshot:
    """A snapshot whose quotas changed under the running work: raised, a team's borrowed jobs
    may now run within its nominal quota (as when they were admitted while other work of the team
    ran); lowered, its work may exceed nominal + borrowing limit."""
    snapshot = draw(snapshots())
    factor = pick((Fraction(1, 2), Fraction(0), Fraction(1), Fraction(2)))
    changed = tuple(
        dataclasses.replace(
            t,
            quotas=tuple(
                dataclasses.replace(
                    q,
                    nominal=q.nominal * draw(factor),
                    borrowing_limit=q.borrowing_limit * draw(factor),
                )
                for q in t.quotas
            ),
        )
        for t in snapshot.teams
    )
    return dataclasses.replace(snapshot, teams=changed)


# ---------------------------------------------------------------------- what a plan did

EVENT_KINDS = (
    "admitted",
    "preempted",
    "borrowed",
    "backfilled",
    "reserved",
    "gang",
    "MIG",
    "time-sliced",
    "reclaimed",
)


def plan_events(snapshot: Snapshot, result: Plan) -> set[str]:
    """The kinds of decision ``result`` made (``EVENT_KINDS``): any admission; a preemption; an
    admission on borrowed quota, backfilled past a blocked job, on a reservation, of a gang
    (several pods), on MIG slices, on time-sliced replicas; another team's borrowed job
    reclaimed (by a lender or a reservation holder). Each is also recorded with ``hypothesis.event``
    (``--hypothesis-show-statistics`` shows the shares)."""
    pending = {p.id: p for p in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    kinds: set[str] = set()
    for admission in result.admissions:
        kinds.add("admitted")
        if admission.capacity is CapacityKind.BORROWED:
            kinds.add("borrowed")
        if admission.capacity is CapacityKind.RESERVED:
            kinds.add("reserved")
        if admission.backfilled:
            kinds.add("backfilled")
        if pending[admission.job_id].pods > 1:
            kinds.add("gang")
        modes = {mode_of(nodes[name]) for name in admission.nodes}
        if "mig" in modes:
            kinds.add("MIG")
        if "time-sliced" in modes:
            kinds.add("time-sliced")
    if result.preemptions:
        kinds.add("preempted")
    running = {j.id: j for j in snapshot.running}
    for preemption in result.preemptions:
        if running[preemption.job_id].team != pending[preemption.for_job].team:
            kinds.add("reclaimed")
    for kind in sorted(kinds):
        event(kind)
    return kinds


def shuffled(snapshot: Snapshot, order: Iterable[int]) -> Snapshot:
    """``snapshot`` with every list (nodes and their MIG slots, queues, classes, teams and their
    quotas, reservations, running jobs, waiting jobs, probes) reordered by the permutation keys
    drawn in ``order`` (reused cyclically)."""
    keys = list(order) or [0]
    position = [0]

    def mix(items: tuple) -> tuple:
        decorated = []
        for i, item in enumerate(items):
            decorated.append((keys[(position[0] + i) % len(keys)], i, item))
        position[0] += len(items)
        return tuple(item for *_, item in sorted(decorated, key=lambda d: (d[0], d[1])))

    return dataclasses.replace(
        snapshot,
        gpu_classes=mix(snapshot.gpu_classes),
        nodes=mix(tuple(dataclasses.replace(n, mig=mix(n.mig)) for n in snapshot.nodes)),
        queues=mix(snapshot.queues),
        capability_classes=mix(snapshot.capability_classes),
        teams=mix(tuple(dataclasses.replace(t, quotas=mix(t.quotas)) for t in snapshot.teams)),
        reservations=mix(snapshot.reservations),
        running=mix(snapshot.running),
        pending=mix(snapshot.pending),
        probes=mix(snapshot.probes),
    )
