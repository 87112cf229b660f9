"""Pending jobs prepared for planning: their order, and what each needs from each GPU class.

Everything here depends only on the snapshot (not on what the plan admits), so it is computed
once per job, and once per distinct (queue, capability, shape) where it can be shared.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from operator import attrgetter, itemgetter
from typing import Any

from queues.admission.capability import CapabilityRequest, resolve_capability
from queues.admission.pods import pod_gpu_eq, pods_held, request_mode
from queues.admission.reasons import PendingReason, ReasonCode, time_text
from queues.admission.snapshot import (
    Node,
    PendingJob,
    Queue,
    SharingMode,
    Snapshot,
    TopologyScope,
)
from queues.admission.state import EXCLUSIVE, MIG, TIME_SLICED, Pool, Shape, State


@dataclass(slots=True)
class Ask:
    """One pending job as the planner sees it.

    ``classes`` are the GPU classes it may run on, cheapest (lowest rate-card weight) first;
    ``demand`` its scaled GPU-eq per class (for time-sliced work the most a node of that class
    could charge, so quota checks stay safe); ``static`` non-empty means no class takes it in
    this plan: none ever can, or it is held back after roll-backs (``held_back_reason``) until
    ``held_until``; such a job keeps its classes and shapes, so the start-time simulation brings
    it in at that time.
    ``key`` identifies every job that the planner would treat identically except for its user:
    a small int, the same for equal (queue, capability, shape, team, runtime) within one plan
    (``State.ask_key``), so that the pass's caches hash it cheaply. ``sort_key`` is its
    ``order_key_of`` key (empty for a probe).
    """

    job: PendingJob
    order: int
    queue: Queue
    runtime: timedelta
    mode: str
    profile: str | None
    classes: tuple[str, ...]
    demand: dict[str, int]
    shapes: dict[str, Shape]
    static: tuple[PendingReason, ...]
    key: int
    rank: tuple[int, int]
    held_until: datetime | None = None
    sort_key: tuple[Any, ...] = ()
    # its least demand on any class: read for every job check of the simulation and the
    # projection, so worked out once (``demand`` is never changed after)
    min_demand: int = field(init=False, default=0, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.min_demand = min(self.demand.values()) if self.demand else 0


def _fallback_queue(name: str) -> Queue:
    return Queue(name=name)


def order_key_factory(snapshot: Snapshot) -> dict[str, int]:
    """Fair-share rank per team: decayed normalized usage divided by weight, ascending (ties by
    name, so the order is total and a team's jobs stay together)."""
    shares = []
    for team in snapshot.teams:
        weight = Fraction(team.weight) if team.weight else Fraction(1)
        shares.append((Fraction(team.recent_usage) / weight, team.name))
    return {name: rank for rank, (_, name) in enumerate(sorted(shares))}


OrderKey = tuple[int, int, int, str, datetime, int]


def order_key_of(snapshot: Snapshot) -> Callable[[PendingJob], OrderKey]:
    """The plan-order key of a pending job: queue priority, job priority (both descending), fair
    share (teams that used less relative to their weight first), team, submit time, id."""
    queues = {queue.name: queue for queue in snapshot.queues}
    team_rank = order_key_factory(snapshot)
    unknown = len(team_rank)

    def key(job: PendingJob) -> OrderKey:
        queue = queues.get(job.queue)
        return (
            -(queue.priority if queue else 0),
            -job.priority,
            team_rank.get(job.team, unknown),
            job.team,
            job.submitted_at,
            job.id,
        )

    return key


def build_asks(state: State) -> list[Ask]:
    """An ask per pending job, in plan order (``Ask.order`` 0, 1, …): ``order_key_of``, except
    that within a queue priority the jobs that fit their team's nominal quota come before those
    that would borrow (``_borrowers``), as Kueue orders a cohort's workloads, so that a team's
    borrowing never takes what another team is about to claim within its quota."""
    key = order_key_of(state.snapshot)
    keyed = sorted(((key(job), job) for job in state.snapshot.pending), key=itemgetter(0))
    asks = _asks(state, [(order, job) for order, (_, job) in enumerate(keyed)])
    for ask, (sort_key, _) in zip(asks, keyed, strict=True):
        ask.sort_key = sort_key
    borrows = _borrowers(state, asks)
    asks.sort(key=lambda ask: (-ask.queue.priority, ask.job.id in borrows, ask.order))
    for order, ask in enumerate(asks):  # fresh asks: numbered in place, not copied
        ask.order = order
    return asks


def _borrowers(
    state: State, asks: list[Ask], room: dict[tuple[str, str], int] | None = None
) -> set[int]:
    """The ids of the asks (in ``order_key_of`` order) that would borrow: of a queue that may
    borrow, and beyond what is left of their team's nominal quota of their cheapest class once
    its running jobs and the asks ahead of them that fit are counted. ``room`` (filled in) is
    what is left per (team, class)."""
    room = {} if room is None else room
    borrows: set[int] = set()
    for ask in asks:
        if ask.static or not ask.classes or ask.queue.reservation_only:
            continue
        gpu_class = ask.classes[0]
        key = (ask.job.team, gpu_class)
        if key not in room:
            room[key] = state.nominal.get(key, 0) - state.nominal_jobs_eq.get(key, 0)
        demand = ask.demand[gpu_class]
        if demand <= room[key]:
            room[key] -= demand
        elif ask.queue.can_borrow:
            borrows.add(ask.job.id)
    return borrows


def build_probe_asks(state: State, asks: list[Ask]) -> list[Ask]:
    """An ask per probe, sorted by (order, probe id). A probe counts as submitted at ``now``, and
    its ``order`` is the number of real jobs ahead of it: every real job of a higher queue
    priority, every one of the same that does not borrow when the probe would, and of the rest
    every one whose order key, id left aside, is lower or equal (``asks`` is in plan order, so a
    binary search finds it)."""
    snapshot = state.snapshot
    if not snapshot.probes:
        return []
    key = order_key_of(snapshot)
    base = sorted(asks, key=attrgetter("sort_key"))
    base_keys = [ask.sort_key[:-1] for ask in base]
    probes = _asks(state, [(0, replace(p, submitted_at=snapshot.now)) for p in snapshot.probes])
    # whether a probe would borrow depends on the quota left by the jobs ahead of it in
    # ``order_key_of`` order: walk them once, stopping at each probe's place
    at = sorted(
        ((bisect.bisect_right(base_keys, key(p.job)[:-1]), p) for p in probes),
        key=lambda item: (item[0], item[1].job.id),
    )
    room: dict[tuple[str, str], int] = {}
    borrows: set[int] = set()
    probe_borrows: set[int] = set()
    done = 0
    for index, probe in at:
        borrows |= _borrowers(state, base[done:index], room)
        done = index
        probe_borrows |= _borrowers(state, [probe], dict(room))
    borrows |= _borrowers(state, base[done:], room)

    ranks = [(-a.queue.priority, a.job.id in borrows, a.sort_key[:-1]) for a in asks]
    placed = [
        replace(
            p,
            order=bisect.bisect_right(
                ranks, (-p.queue.priority, p.job.id in probe_borrows, key(p.job)[:-1])
            ),
        )
        for p in probes
    ]
    placed.sort(key=lambda ask: (ask.order, ask.job.id))
    return placed


@dataclass(frozen=True, slots=True)
class Resolved:
    """What jobs of one queue, capability and shape may use: the GPU classes in cost order,
    with the job's demand (scaled GPU-eq) and pod shape on each; or, when no class can take
    it, the ``static`` reason why."""

    mode: str
    profile: str | None
    classes: tuple[str, ...] = ()
    demand: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, Shape] = field(default_factory=dict)
    static: tuple[PendingReason, ...] = ()


ResolveKey = tuple[object, ...]


def _asks(state: State, jobs: list[tuple[int, PendingJob]]) -> list[Ask]:
    """Asks for ``(order, job)`` pairs; jobs of the same queue, capability and shape share one
    resolution."""
    snapshot = state.snapshot
    capabilities = {c.name: c for c in snapshot.capability_classes}
    cost_order = sorted(state.classes.values(), key=lambda g: (Fraction(g.weight), g.name))
    resolved: dict[ResolveKey, Resolved] = {}
    asks: list[Ask] = []
    for order, job in jobs:
        queue = state.queues.get(job.queue) or _fallback_queue(job.queue)
        runtime = job.runtime_limit or queue.default_runtime
        rkey: ResolveKey = (
            queue.name,
            job.capability,
            job.memory_gb,
            job.pods,
            job.gpus_per_pod,
            job.cpu_millicores,
            job.memory_mib,
        )
        if job.queue not in state.queues:
            rkey = ("?", *rkey)
        if rkey not in resolved:
            resolved[rkey] = _resolve(
                state,
                queue,
                capabilities.get(job.capability),
                job,
                cost_order,
                job.queue in state.queues,
            )
        resolution = resolved[rkey]
        static = resolution.static
        held_until = None
        if not static and job.not_before is not None and held_back(job, snapshot.now):
            static = (held_back_reason(job, job.not_before),)
            held_until = retry_minute(job.not_before)
        asks.append(
            Ask(
                job=job,
                order=order,
                queue=queue,
                runtime=runtime,
                mode=resolution.mode,
                profile=resolution.profile,
                classes=resolution.classes,
                demand=resolution.demand,
                shapes=resolution.shapes,
                static=static,
                key=state.ask_key((rkey, job.team, runtime)),
                rank=(queue.priority, job.priority),
                held_until=held_until,
            )
        )
    return asks


@dataclass(slots=True)
class _Candidates:
    """The classes a capability matched, sorted into those the job may use and why not the rest."""

    usable: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    too_small: list[str] = field(default_factory=list)  # no node of the class holds one pod
    pod_limits: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _resolve(
    state: State,
    queue: Queue,
    capability: CapabilityRequest | None,
    job: PendingJob,
    cost_order: list[Any],
    queue_known: bool,
) -> Resolved:
    """Which classes a job of this queue and capability may use, in cost order, with its demand
    and pod shape on each; or the static reason none can. In steps: the sharing mode, the
    refusals that need no class, the candidate classes, then demand and shape on each."""
    mode, profile = _sharing(queue, capability)
    refusal = _refusal(queue, capability, job, queue_known)
    if refusal is not None:
        return Resolved(mode, profile, static=(refusal,))
    assert capability is not None  # _refusal refuses an unknown capability class
    resolution = resolve_capability(capability, [g.spec for g in cost_order])
    candidates = _candidates(state, queue, job, resolution.matches, mode, profile)
    for name in state.classes:
        if name not in resolution.matches:
            candidates.rejected[name] = resolution.why_not(name)
    if not candidates.usable:
        reason = _no_class_reason(
            state, queue, capability, job, resolution.matches, candidates, mode, profile
        )
        return Resolved(mode, profile, static=(reason,))
    demand: dict[str, int] = {}
    shapes: dict[str, Shape] = {}
    for name in candidates.usable:
        demand[name], shapes[name] = _demand_and_shape(
            state, queue, job, name, mode, profile, candidates.pod_limits.get(name, ())
        )
    return Resolved(mode, profile, tuple(candidates.usable), demand, shapes)


def _sharing(queue: Queue, capability: CapabilityRequest | None) -> tuple[str, str | None]:
    """The sharing mode a job asks for and its MIG profile: a MIG capability asks for slices;
    otherwise the queue's sharing decides."""
    profile = capability.mig_profile if capability else None
    mode = request_mode(
        time_sliced_queue=queue.sharing is SharingMode.TIME_SLICED, mig_profile=profile
    )
    return mode, profile if mode == MIG else None


def _refusal(
    queue: Queue, capability: CapabilityRequest | None, job: PendingJob, queue_known: bool
) -> PendingReason | None:
    """The reason no class can take the job whatever the cluster: an unknown queue or
    capability class, or one the queue does not accept."""
    if not queue_known:
        return _no_match(f"queue {queue.name} does not exist", {})
    if capability is None:
        return _no_match(f"capability class {job.capability} does not exist", {})
    if queue.capability_classes and capability.name not in queue.capability_classes:
        message = f"queue {queue.name} does not accept capability class {capability.name}"
        details = {"queue": queue.name, "accepted": list(queue.capability_classes)}
        hint = f"use one of: {', '.join(queue.capability_classes)}"
        return _no_match(message, details, hint)
    return None


def _candidates(
    state: State,
    queue: Queue,
    job: PendingJob,
    matches: tuple[str, ...],
    mode: str,
    profile: str | None,
) -> _Candidates:
    """The matching classes the queue allows, whose memory fits a time-sliced job's declared
    use, that have nodes for this sharing mode and nodes big enough for one pod."""
    allowed = set(queue.gpu_classes) if queue.gpu_classes else None
    found = _Candidates()
    for name in matches:
        if allowed is not None and name not in allowed:
            found.rejected[name] = f"queue {queue.name} does not allow it"
            continue
        gpu = state.classes[name]
        if mode == TIME_SLICED and job.memory_gb is not None and job.memory_gb > gpu.spec.hbm_gb:
            found.rejected[name] = f"declares {job.memory_gb} GB > {gpu.spec.hbm_gb} GB HBM"
            continue
        if (name, mode, profile) not in state.pools:
            found.rejected[name] = _no_nodes(mode, profile)
            continue
        if job.cpu_millicores or job.memory_mib:
            pool = state.pools[(name, mode, profile)]
            limits = _pod_limits(state, pool, job)
            if limits and not any(limits):
                found.rejected[name] = _too_small_text(state, pool, job)
                found.too_small.append(name)
                continue
            if limits:
                found.pod_limits[name] = limits
        found.usable.append(name)
    return found


def _demand_and_shape(
    state: State,
    queue: Queue,
    job: PendingJob,
    name: str,
    mode: str,
    profile: str | None,
    pod_limits: tuple[int, ...],
) -> tuple[int, Shape]:
    """The job's demand on class ``name`` in scaled GPU-eq (for time-sliced work the most a node
    of the class could charge, so quota checks stay safe), and its pod shape there."""
    gpu = state.classes[name]
    hbm = 0
    replicas = 1
    if mode == TIME_SLICED:
        pool = state.pools.get((name, TIME_SLICED, None))
        replicas = (
            min((state.nodes[i].time_slice_replicas for i in pool.nodes), default=1) if pool else 1
        )
        hbm = (
            job.memory_gb
            if job.memory_gb is not None
            else gpu.spec.hbm_gb // replicas * job.gpus_per_pod
        )
    per_pod = pod_gpu_eq(
        mode,
        gpus_per_pod=job.gpus_per_pod,
        mig_share=Fraction(gpu.spec.mig_profiles[profile or ""]) if mode == MIG else Fraction(1),
        least_replicas=replicas,
    )
    topology = queue.required_topology if job.pods > 1 else TopologyScope.NONE
    shape = Shape(
        job.pods,
        job.gpus_per_pod,
        hbm,
        topology,
        frozenset(queue.tolerations),
        frozenset(i for i, n in enumerate(pod_limits) if n == 0),
        pod_limits,
    )
    return state.eq_units(per_pod * job.pods), shape


def _no_class_reason(
    state: State,
    queue: Queue,
    capability: CapabilityRequest,
    job: PendingJob,
    matches: tuple[str, ...],
    found: _Candidates,
    mode: str,
    profile: str | None,
) -> PendingReason:
    """Why no class can take the job: the cluster has no nodes for this kind of request (a MIG
    profile nowhere offered, say), or every class was ruled out, each with its reason."""
    details: dict[str, Any]
    if not found.too_small and any(name in found.rejected for name in matches):
        names = [name for name in matches if found.rejected.get(name, "").startswith("no ")]
        if names and mode == MIG:
            message = (
                f"no node offers MIG profile {profile} ({', '.join(names)} nodes do not have it)"
            )
            details = {"profile": profile, "gpu_classes": names, "free": 0}
            return PendingReason(ReasonCode.MIG_PROFILE_UNAVAILABLE, message, details, "")
        if names:
            message = f"the cluster has no {_kind_words(mode)} nodes of {', '.join(names)}"
            details = {"gpu_classes": names, "free": 0, "capacity_gpu_eq": 0}
            return PendingReason(ReasonCode.INSUFFICIENT_CAPACITY, message, details, "")
    parts = [f"{name}: {why}" for name, why in sorted(found.rejected.items())]
    message = (
        f"capability class {capability.name} matches no GPU class queue {queue.name} allows"
        + (f" ({'; '.join(parts)})" if parts else "")
    )
    details = {
        "capability": capability.name,
        "queue": queue.name,
        "allowed_classes": sorted(queue.gpu_classes)
        if queue.gpu_classes
        else sorted(state.classes),
        "rejections": dict(sorted(found.rejected.items())),
    }
    if found.too_small:
        candidates = [
            (state.nodes[i], name)
            for name in found.too_small
            for i in state.pools[(name, mode, profile)].nodes
        ]
        hint = smaller_pod_hint(candidates, job)
    else:
        hint = _no_match_hint(state, queue, capability, job)
    return _no_match(message, details, hint)


def shape_on(state: State, shape: Shape, pool: Pool, job: PendingJob) -> Shape:
    """``shape`` (of the job on another pool) with the size limits of ``pool``'s nodes."""
    limits = _pod_limits(state, pool, job) if job.cpu_millicores or job.memory_mib else ()
    excluded = frozenset(local for local, most in enumerate(limits) if most == 0)
    return replace(shape, excluded=excluded, pod_limits=limits)


def _pod_limits(state: State, pool: Pool, job: PendingJob) -> tuple[int, ...]:
    """How many of ``job``'s pods each local node of ``pool`` holds by its allocatable CPU and
    memory (a size a node does not report is no limit), capped at the job's pods; empty when no
    node limits it. Nodes come in a few sizes: the pool is grouped by size once per plan."""
    key = (pool.gpu_class, pool.mode, pool.profile)
    grouped = state.node_sizes_memo.get(key)
    if grouped is None:
        grouped = {}
        for local, i in enumerate(pool.nodes):
            node = state.nodes[i]
            grouped.setdefault((node.cpu_millicores, node.memory_mib), []).append(local)
        state.node_sizes_memo[key] = grouped
    limited: list[tuple[int, list[int]]] = []
    for (cpu, memory), locals_ in grouped.items():
        most = pods_held(cpu, memory, job.cpu_millicores, job.memory_mib, job.pods)
        if most < job.pods:
            limited.append((most, locals_))
    if not limited:
        return ()
    limits = [job.pods] * len(pool.nodes)
    for most, locals_ in limited:
        for local in locals_:
            limits[local] = most
    return tuple(limits)


def _too_small_text(state: State, pool: Pool, job: PendingJob) -> str:
    """Why no node of ``pool`` could hold one of ``job``'s pods."""
    nodes = [state.nodes[i] for i in pool.nodes]
    cpu, memory = job.cpu_millicores, job.memory_mib
    cores = f"{cpu / 1000:g} CPU cores"
    most_cpu = max(n.cpu_millicores for n in nodes)
    most_memory = max(n.memory_mib for n in nodes)
    if all(n.cpu_millicores for n in nodes) and cpu > most_cpu:
        return f"its nodes allocate at most {most_cpu / 1000:g} CPU cores, a pod asks {cores}"
    if all(n.memory_mib for n in nodes) and memory > most_memory:
        return f"its nodes allocate at most {most_memory:,} MiB memory, a pod asks {memory:,} MiB"
    return f"none of its nodes allocates both the {cores} and {memory:,} MiB a pod asks"


def smaller_pod_hint(candidates: list[tuple[Node, str]], job: PendingJob) -> str:
    """Of ``(node, its GPU class)`` candidates, the one a pod would fit with the least cut in CPU
    or memory (a size the node does not report is no limit), and what it allocates."""

    def room(node: Node) -> Fraction:
        shares = [
            Fraction(have, want)
            for have, want in (
                (node.cpu_millicores, job.cpu_millicores),
                (node.memory_mib, job.memory_mib),
            )
            if have and want
        ]
        return min(shares, default=Fraction(10**9))

    best, gpu_class = max(candidates, key=lambda c: room(c[0]))
    sizes = []
    if best.cpu_millicores:
        sizes.append(f"{best.cpu_millicores / 1000:g} CPU cores")
    if best.memory_mib:
        sizes.append(f"{best.memory_mib:,} MiB memory")
    allocates = " and ".join(sizes)
    return f"node {best.name} ({gpu_class}) allocates {allocates}: ask for at most that per pod"


def _no_nodes(mode: str, profile: str | None) -> str:
    if mode == MIG:
        return f"no node offers MIG profile {profile}"
    return f"no {_kind_words(mode)} nodes"


def _kind_words(mode: str) -> str:
    return {EXCLUSIVE: "whole-GPU", MIG: "MIG", TIME_SLICED: "time-sliced"}[mode]


def held_back(job: PendingJob, now: datetime) -> bool:
    """Whether ``job`` waits out a back-off after roll-backs (see ``held_back_reason``)."""
    return job.not_before is not None and job.not_before > now


def retry_minute(until: datetime) -> datetime:
    """``until`` rounded up to the minute: "tries again at 12:02" (and the estimated start
    that goes with it) is never early."""
    minute = until.replace(second=0, microsecond=0)
    return minute if minute == until else minute + timedelta(minutes=1)


def held_back_reason(job: PendingJob, until: datetime) -> PendingReason:
    """Why a job the cluster could not start is not planned before ``until``."""
    times = "once" if job.rollbacks == 1 else f"{job.rollbacks} times in a row"
    said = f"; the scheduler said: {job.unschedulable}" if job.unschedulable else ""
    shown = retry_minute(until)
    return PendingReason(
        ReasonCode.CLUSTER_UNSCHEDULABLE,
        f"rolled back {times}: the cluster could not start it{said}; "
        f"the portal tries again at {time_text(shown)}",
        {
            "scheduler_message": job.unschedulable,
            "rollbacks": job.rollbacks,
            "not_before": until.isoformat(),
        },
        "if the scheduler's message names cpu or memory, ask for less per pod: the portal plans "
        "GPUs, the cluster's scheduler checks the rest",
    )


def _no_match(message: str, details: dict[str, Any], hint: str = "") -> PendingReason:
    return PendingReason(ReasonCode.NO_MATCHING_GPU_CLASS, message, details, hint)


def _no_match_hint(
    state: State, queue: Queue, capability: CapabilityRequest, job: PendingJob
) -> str:
    """Another queue of the team that allows a class this capability matches, or a capability
    class this queue accepts that matches a class it allows."""
    specs = [
        g.spec for g in sorted(state.classes.values(), key=lambda g: (Fraction(g.weight), g.name))
    ]
    matches = resolve_capability(capability, specs).matches
    for other in sorted(state.queues.values(), key=lambda q: q.name):
        if other.name == queue.name or (other.teams and job.team not in other.teams):
            continue
        if other.capability_classes and capability.name not in other.capability_classes:
            continue
        usable = [m for m in matches if not other.gpu_classes or m in other.gpu_classes]
        if usable:
            return (
                f"queue `{other.name}` allows {usable[0]}, "
                f"which capability class {capability.name} matches"
            )
    allowed = [s for s in specs if not queue.gpu_classes or s.name in queue.gpu_classes]
    for candidate in sorted(state.snapshot.capability_classes, key=lambda c: c.name):
        if candidate.name == capability.name:
            continue
        if queue.capability_classes and candidate.name not in queue.capability_classes:
            continue
        found = resolve_capability(candidate, allowed).matches
        if found:
            return (
                f"capability class `{candidate.name}` matches {found[0]}, "
                f"which queue {queue.name} allows"
            )
    return ""
