"""The engine's mutable working state: free capacity per node and pool, quota use per team,
reservation use, per-user counts. Internal to the engine; built from a ``Snapshot``.

GPU-equivalents are kept as integers scaled by ``State.scale`` (the least common multiple of every
denominator in the snapshot), because the planner adds and compares them millions of times and
``Fraction`` arithmetic would dominate the run time. Conversions back happen only at the edges.

Capacity is indexed by *pool*: one pool per (GPU class, node mode, MIG profile). A pool keeps, per
node, the free devices (whole GPUs, slices of its profile, or time-slice replicas) and buckets of
eligible nodes by free count, so a single-pod best fit does not scan every node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TYPE_CHECKING

from queues.admission.reasons import PendingReason
from queues.admission.snapshot import (
    COMING_MARK,
    CapacityKind,
    GpuClass,
    JobId,
    MaintenanceState,
    Node,
    PreemptionClass,
    Queue,
    Reservation,
    RunningJob,
    Snapshot,
    TopologyScope,
)

if TYPE_CHECKING:  # the type of a cache this state keeps for backfill.py
    from queues.admission.backfill import _Found, _Profile

EXCLUSIVE = "x"
MIG = "m"
TIME_SLICED = "t"

PoolKey = tuple[str, str, str | None]  # a pool's GPU class, mode and MIG profile
# a pool (by ``id``), the tolerations and excluded nodes of a shape, the class's version
ReleasesKey = tuple[int, frozenset[str], frozenset[int], int]


def taint_key(taint: str) -> str:
    """``key=value:Effect`` or ``key:Effect`` → ``key``."""
    return taint.split(":", 1)[0].split("=", 1)[0]


def node_mode(node: Node) -> str:
    if node.mig:
        return MIG
    if node.time_slice_replicas > 1:
        return TIME_SLICED
    return EXCLUSIVE


@dataclass(slots=True)
class Pool:
    """All nodes of one GPU class that serve one kind of device (see module docstring)."""

    gpu_class: str
    mode: str
    profile: str | None
    hbm_per_gpu: int
    nodes: list[int] = field(default_factory=list)  # global node indices, name order
    free: list[int] = field(default_factory=list)  # free devices per local node
    cap: list[int] = field(default_factory=list)  # devices the portal may ever use per node
    total: list[int] = field(default_factory=list)  # devices per node, incl. outside the portal
    unit: list[int] = field(default_factory=list)  # scaled GPU-eq of one device per local node
    hbm_free: list[int] = field(default_factory=list)  # time-sliced: undeclared HBM GB
    hbm_total: list[int] = field(default_factory=list)  # time-sliced: HBM GB of the empty node
    hbm_claim: list[int] = field(default_factory=list)  # time-sliced: default GB per replica
    eligible: list[bool] = field(default_factory=list)
    rack: list[str] = field(default_factory=list)
    domain: list[str] = field(default_factory=list)
    taints: list[frozenset[str]] = field(default_factory=list)
    local_of: dict[int, int] = field(default_factory=dict)
    by_free: list[set[int]] = field(default_factory=list)  # eligible local nodes by free count
    free_devices: int = 0  # on eligible nodes
    # scaled GPU-eq on eligible nodes: free, capacity, and held outside the portal. Per pool, so
    # reasons about whole GPUs never count MIG slices or replicas of the same class.
    free_eq: int = 0
    capacity_eq: int = 0
    outside_eq: int = 0
    tainted: bool = False


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """A team's use of its quota for one GPU class, scaled GPU-eq.

    A job is admitted wholly as nominal or borrowed (that decides whether a lender may reclaim
    it), but what the team *uses* is split by amount: everything its nominal and borrowed jobs
    hold, up to ``nominal``, is within its guarantee (``nominal_in_use``), the rest is borrowed
    (``borrowed_in_use``). A borrowed job therefore fills the team's unused nominal room first:
    with nominal 4 and borrowing limit 4, one 8-GPU borrowed job is 4 in use within the quota and
    4 borrowed. ``above`` is what exceeds nominal + borrowing limit, which only happens when the
    quota was lowered under running work; it is never counted as in use of either.
    """

    nominal: int
    borrowing_limit: int
    nominal_in_use: int
    borrowed_in_use: int
    above: int = 0


@dataclass(slots=True)
class PodSpot:
    """One pod's hold: ``devices`` on local node ``local`` of ``pool``."""

    pool: Pool
    local: int
    devices: int
    hbm: int
    eq: int


@dataclass(slots=True)
class Alloc:
    """A job holding capacity in the working state (running, admitted, or started in a
    simulation)."""

    job_id: JobId
    team: str
    queue: str
    user: str
    gpu_class: str
    kind: CapacityKind
    reservation_id: int | None
    spots: list[PodSpot]
    eq: int
    end: datetime
    rank: tuple[int, int]  # (queue priority, job priority): higher is more important
    preemptible: bool
    grace: timedelta
    lost_work: timedelta
    live: bool = True
    stopping: bool = False  # its pods are terminating: ``end`` is their grace period's end
    # False: it holds devices only, not quota, a reservation or a user's limits (the part of a
    # job preempted in this pass that its preemptor does not take, until its pods are gone)
    counts: bool = True


@dataclass(frozen=True, slots=True)
class Shape:
    """What a job needs from one pool: ``pods`` × ``devices`` (+ ``hbm`` GB per time-sliced pod)
    placed within one ``topology`` domain when required, on nodes whose taints it tolerates.
    ``pod_limits``, when set, is the most of its pods each local node holds by CPU and memory
    (0: the node is too small for one; those are also ``excluded``). It is set only when it
    binds somewhere (fewer than ``pods`` on some node), so most shapes carry none."""

    pods: int
    devices: int
    hbm: int
    topology: TopologyScope
    tolerations: frozenset[str]
    excluded: frozenset[int] = frozenset()
    pod_limits: tuple[int, ...] = ()

    def without_size_limits(self) -> Shape:
        """The same request as if every node had the CPU and memory for it."""
        return replace(self, excluded=frozenset(), pod_limits=())


Placement = list[tuple[int, int]]  # (local node, pods on it)


def lcm_scale(snapshot: Snapshot) -> int:
    """The least common multiple of every denominator that can appear, so scaled GPU-eq is
    always an integer."""
    denominators: set[int] = {1}
    for gpu in snapshot.gpu_classes:
        denominators.update(Fraction(share).denominator for share in gpu.spec.mig_profiles.values())
    for node in snapshot.nodes:
        denominators.add(max(1, node.time_slice_replicas))
        denominators.add(Fraction(node.outside_gpu_eq).denominator)
    for team in snapshot.teams:
        for quota in team.quotas:
            denominators.add(Fraction(quota.nominal).denominator)
            denominators.add(Fraction(quota.borrowing_limit).denominator)
    for reservation in snapshot.reservations:
        denominators.add(Fraction(reservation.amount).denominator)
    for job in snapshot.running:
        denominators.add(Fraction(job.gpu_eq_per_pod).denominator)
    for queue in snapshot.queues:
        if queue.max_gpu_eq_per_user is not None:
            denominators.add(Fraction(queue.max_gpu_eq_per_user).denominator)
    return math.lcm(*sorted(denominators))


def lost_work(job: RunningJob, now: datetime) -> timedelta:
    """Work since the last checkpoint: a real one if reported, else the last interval boundary
    from the start, else everything since the start."""
    return work_since_checkpoint(
        started_at=job.started_at,
        last_checkpoint=job.last_checkpoint,
        checkpoint_interval=job.checkpoint_interval,
        now=now,
    )


def work_since_checkpoint(
    *,
    started_at: datetime | None,
    last_checkpoint: datetime | None,
    checkpoint_interval: timedelta | None,
    now: datetime,
) -> timedelta:
    """``lost_work``'s rule on plain values (the reconcile's drain stops use it too)."""
    if started_at is None or started_at >= now:
        return timedelta(0)
    if last_checkpoint is not None and last_checkpoint <= now:
        return now - max(last_checkpoint, started_at)
    ran = now - started_at
    if checkpoint_interval:
        return ran % checkpoint_interval
    return ran


class State:
    """Mutable capacity and accounting, built from a snapshot. Every change goes through
    ``take`` and ``give_back`` (or back to a ``checkpoint`` through ``rollback``) so the
    aggregates stay consistent with the per-node numbers."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.scale = lcm_scale(snapshot)
        self.classes: dict[str, GpuClass] = {g.name: g for g in snapshot.gpu_classes}
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        self.nodes: list[Node] = sorted(snapshot.nodes, key=lambda n: n.name)
        self.node_index = {node.name: i for i, node in enumerate(self.nodes)}
        # nodes not there yet (a node pool's, elastic.py), and while the forecast's first
        # scenario runs (``forecast``), each job it starts on one of them: when, and on which
        self.coming_nodes = frozenset(
            i for i, node in enumerate(self.nodes) if COMING_MARK in node.name
        )
        self.landing: dict[JobId, tuple[datetime, tuple[str, ...]]] | None = None
        self.pools: dict[PoolKey, Pool] = {}
        self.class_pools: dict[str, list[Pool]] = {}
        self.node_pools: list[list[Pool]] = [[] for _ in self.nodes]
        self.node_eligible: list[bool] = []
        # scaled GPU-eq, per class: free on eligible nodes, and capacity / free per node state
        self.class_free: dict[str, int] = {name: 0 for name in self.classes}
        self.class_capacity: dict[str, int] = {name: 0 for name in self.classes}
        self.class_version: dict[str, int] = {name: 0 for name in self.classes}
        self.nominal: dict[tuple[str, str], int] = {}
        self.borrow_limit: dict[tuple[str, str], int] = {}
        # scaled GPU-eq held by the team's jobs admitted as nominal resp. borrowed; what the team
        # uses *within* its nominal quota and what it borrows comes from ``quota_use``
        self.nominal_jobs_eq: dict[tuple[str, str], int] = {}
        self.borrowed_jobs_eq: dict[tuple[str, str], int] = {}
        self.user_jobs: dict[tuple[str, str], int] = {}
        self.user_eq: dict[tuple[str, str], int] = {}
        self.reservations: dict[int, Reservation] = {r.id: r for r in snapshot.reservations}
        self.res_active: dict[int, bool] = {}
        self.res_used: dict[int, int] = {}
        self.res_idle: dict[int, int] = {}
        self.res_idle_total: dict[str, int] = {name: 0 for name in self.classes}
        self.allocs: dict[JobId, Alloc] = {}
        self.class_allocs: dict[str, dict[JobId, Alloc]] = {name: {} for name in self.classes}
        self.res_amount: dict[int, int] = {}
        self.holders: dict[tuple[str, str], list[int]] = {}
        self.outside: dict[str, int] = {name: 0 for name in self.classes}
        self.user_allocs: dict[tuple[str, str], dict[JobId, Alloc]] = {}
        # Per-plan caches, each keyed and valued by what it keeps. backfill.py: a class's running
        # jobs by end as running sums, per class and ``class_changes`` (the forecast puts a class's
        # number back with its contents, so a replay finds those of the pass);
        # estimate.py: a queue's per-user GPU-eq cap, scaled
        self.profiles: dict[tuple[str, int], _Profile] = {}
        self.user_eq_caps: dict[str, int] = {}
        # never.py: the verdict per ask (``Ask.key``), queue and user; whether a shape fits a
        # pool (by ``id``) once it is empty
        self.never_fits_memo: dict[int, PendingReason | None] = {}
        self.fits_empty_memo: dict[tuple[int, Shape], bool] = {}
        # asks.py: a pool's local nodes grouped by (allocatable CPU, memory), per pool key
        self.node_sizes_memo: dict[PoolKey, dict[tuple[int, int], list[int]]] = {}
        # diagnose.py: per pool, tolerations, excluded nodes and class version, what each of
        # the class's jobs gives back and when, sorted by end
        self.releases_memo: dict[ReleasesKey, list[tuple[datetime, bool, int]]] = {}
        # and what each job gives back there (its devices on open nodes it may use), per pool,
        # tolerations, excluded nodes and ``eligible_changes``: a job's pods do not move
        self.release_devices: dict[ReleasesKey, dict[JobId, tuple[Alloc, int]]] = {}
        self.eligible_changes = 0  # nodes that left or joined the pools (``set_node_eligible``)
        # backfill.py: each reservation search's result (found or None) and the attempts it cost,
        # by job, class, option, the class's content and the reservations ahead (``_reserve``)
        self.reserve_memo: dict[tuple[object, ...], tuple[_Found | None, int]] = {}
        # ``Ask.key`` numbers (``ask_key``); a copy made for a replay shares them
        self.ask_keys: dict[tuple[object, ...], int] = {}
        # Counts every change of what jobs hold, of reservations and of node eligibility (not
        # the planner's own shadows, which bump ``class_version``): a key for what depends on
        # those alone.
        self.changes = 0
        # per class, ``changes`` at the last change of what its jobs hold, its nodes'
        # eligibility or its reservations: equal numbers, equal contents of the class (the
        # forecast puts the numbers back with the contents between its replays, ``rollback``)
        self.class_changes: dict[str, int] = {name: 0 for name in self.classes}
        self._build_nodes()
        self._build_quotas()
        self._build_reservations()
        for job in sorted(snapshot.running, key=lambda j: j.id):
            self._load_running(job)

    def ask_key(self, key: tuple[object, ...]) -> int:
        """A small int for ``key``, the same for equal keys: the pass's caches are keyed by
        it thousands of times, and a nested tuple is hashed anew every time."""
        return self.ask_keys.setdefault(key, len(self.ask_keys))

    # ------------------------------------------------------------------ building

    def eq_units(self, value: Fraction | int) -> int:
        scaled = Fraction(value) * self.scale
        return math.ceil(scaled)

    def _build_nodes(self) -> None:
        for index, node in enumerate(self.nodes):
            gpu = self.classes.get(node.gpu_class)
            eligible = node.healthy and node.maintenance is MaintenanceState.NONE
            self.node_eligible.append(eligible)
            if gpu is None:
                continue
            mode = node_mode(node)
            taints = frozenset(taint_key(t) for t in node.taints)
            if mode == MIG:
                for slots in sorted(node.mig, key=lambda s: s.profile):
                    share = Fraction(gpu.spec.mig_profiles.get(slots.profile, Fraction(1, 7)))
                    unit = int(share * self.scale)
                    free = max(0, slots.total - slots.outside)
                    self._add_to_pool(
                        node, index, mode, slots.profile, slots.total, free, unit, 0, 0, taints
                    )
                    self.outside[gpu.name] += slots.outside * unit
                    self.class_capacity[gpu.name] += slots.total * unit if eligible else 0
            elif mode == TIME_SLICED:
                replicas = node.time_slice_replicas
                unit = self.scale // replicas
                outside = math.ceil(Fraction(node.outside_gpu_eq) * replicas)
                free = max(0, node.gpus * replicas - outside)
                claim = gpu.spec.hbm_gb // replicas
                hbm = max(0, node.gpus * gpu.spec.hbm_gb - outside * claim)
                total = node.gpus * replicas
                self._add_to_pool(
                    node,
                    index,
                    mode,
                    None,
                    total,
                    free,
                    unit,
                    hbm,
                    claim,
                    taints,
                    hbm_total=node.gpus * gpu.spec.hbm_gb,
                )
                self.outside[gpu.name] += outside * unit
                self.class_capacity[gpu.name] += node.gpus * self.scale if eligible else 0
            else:
                outside = math.ceil(Fraction(node.outside_gpu_eq))
                free = max(0, node.gpus - outside)
                self._add_to_pool(
                    node, index, mode, None, node.gpus, free, self.scale, 0, 0, taints
                )
                self.outside[gpu.name] += outside * self.scale
                self.class_capacity[gpu.name] += node.gpus * self.scale if eligible else 0

    def _add_to_pool(
        self,
        node: Node,
        index: int,
        mode: str,
        profile: str | None,
        total: int,
        free: int,
        unit: int,
        hbm: int,
        claim: int,
        taints: frozenset[str],
        hbm_total: int = 0,
    ) -> None:
        key = (node.gpu_class, mode, profile)
        pool = self.pools.get(key)
        if pool is None:
            gpu = self.classes[node.gpu_class]
            pool = Pool(
                gpu_class=node.gpu_class, mode=mode, profile=profile, hbm_per_gpu=gpu.spec.hbm_gb
            )
            self.pools[key] = pool
            self.class_pools.setdefault(node.gpu_class, []).append(pool)
        local = len(pool.nodes)
        pool.nodes.append(index)
        pool.local_of[index] = local
        pool.free.append(free)
        pool.cap.append(free)
        pool.total.append(total)
        pool.unit.append(unit)
        pool.hbm_free.append(hbm)
        pool.hbm_total.append(hbm_total)
        pool.hbm_claim.append(claim)
        eligible = self.node_eligible[index]
        pool.eligible.append(eligible)
        pool.rack.append(node.rack or f"node:{node.name}")
        pool.domain.append(node.network_domain or f"node:{node.name}")
        pool.taints.append(taints)
        pool.tainted = pool.tainted or bool(taints)
        self.node_pools[index].append(pool)
        if eligible:
            while free >= len(pool.by_free):
                pool.by_free.append(set())
            pool.by_free[free].add(local)
            pool.free_devices += free
            pool.free_eq += free * unit
            pool.capacity_eq += total * unit
            pool.outside_eq += (total - free) * unit
            self.class_free[node.gpu_class] += free * unit

    def _build_quotas(self) -> None:
        for team in self.snapshot.teams:
            for quota in team.quotas:
                key = (team.name, quota.gpu_class)
                self.nominal[key] = self.eq_units(quota.nominal)
                self.borrow_limit[key] = self.eq_units(quota.borrowing_limit)

    def _build_reservations(self) -> None:
        for rid in sorted(self.reservations):
            reservation = self.reservations[rid]
            self.res_amount[rid] = self.eq_units(reservation.amount)
            self.holders.setdefault((reservation.team, reservation.gpu_class), []).append(rid)
            self.res_used[rid] = 0
            self.res_idle[rid] = 0
            self.res_active[rid] = False
            self.set_reservation_active(rid, self.reservations[rid].active_at(self.now))

    def _load_running(self, job: RunningJob) -> None:
        queue = self.queues.get(job.queue)
        spots: list[PodSpot] = []
        for node_name in job.pods:
            index = self.node_index.get(node_name)
            if index is None:
                continue
            pool = self._pool_for_running(index, job)
            if pool is None:
                continue
            local = pool.local_of[index]
            unit = pool.unit[local]
            devices = max(1, math.ceil(Fraction(job.gpu_eq_per_pod) * self.scale / unit))
            hbm = 0
            if pool.mode == TIME_SLICED:
                hbm = (
                    job.memory_gb if job.memory_gb is not None else pool.hbm_claim[local] * devices
                )
            spots.append(PodSpot(pool, local, devices, hbm, devices * unit))
        start = job.started_at or self.now
        preemption = queue.preemption if queue else PreemptionClass.NEVER
        alloc = Alloc(
            job_id=job.id,
            team=job.team,
            queue=job.queue,
            user=job.user,
            gpu_class=job.gpu_class,
            kind=job.capacity,
            reservation_id=job.reservation_id,
            spots=spots,
            eq=self.eq_units(job.gpu_eq),
            end=max(self.now, start + job.runtime_limit),
            rank=(queue.priority if queue else 0, job.priority),
            preemptible=preemption is not PreemptionClass.NEVER and not job.terminating,
            grace=queue.grace_period if queue else timedelta(0),
            lost_work=lost_work(job, self.now),
            stopping=job.terminating,
        )
        self.take(alloc)

    def _pool_for_running(self, index: int, job: RunningJob) -> Pool | None:
        pools = self.node_pools[index]
        if job.mig_profile is not None:
            for pool in pools:
                if pool.profile == job.mig_profile:
                    return pool
            return None
        return pools[0] if pools and pools[0].mode != MIG else None

    # ------------------------------------------------------------------ changes

    def take(self, alloc: Alloc) -> None:
        """Add ``alloc``'s hold to every aggregate."""
        self._apply(alloc, -1)
        self.allocs[alloc.job_id] = alloc
        if alloc.gpu_class in self.class_allocs:
            self.class_allocs[alloc.gpu_class][alloc.job_id] = alloc
        if alloc.counts:
            key = (alloc.queue, alloc.user)
            mine = self.user_allocs.get(key)
            if mine is None:
                mine = self.user_allocs[key] = {}
            mine[alloc.job_id] = alloc
        alloc.live = True

    def give_back(self, alloc: Alloc) -> None:
        """Release ``alloc``'s hold (it ended or is preempted)."""
        if not alloc.live:
            return
        self._apply(alloc, +1)
        alloc.live = False
        self.allocs.pop(alloc.job_id, None)
        if alloc.gpu_class in self.class_allocs:
            self.class_allocs[alloc.gpu_class].pop(alloc.job_id, None)
        mine = self.user_allocs.get((alloc.queue, alloc.user))
        if mine is not None:
            mine.pop(alloc.job_id, None)

    def _apply(self, alloc: Alloc, sign: int) -> None:
        class_free = self.class_free
        for spot in alloc.spots:
            pool = spot.pool
            local = spot.local
            free = pool.free
            old = free[local]
            new = old + sign * spot.devices
            free[local] = new
            if pool.mode == TIME_SLICED:
                pool.hbm_free[local] += sign * spot.hbm
            if pool.eligible[local]:
                # the node moves between the pool's free-count buckets; an inconsistent
                # snapshot may over-commit a node: it then counts as full, not negative
                old = old if old > 0 else 0
                new = new if new > 0 else 0
                by_free = pool.by_free
                by_free[old].discard(local)
                while new >= len(by_free):
                    by_free.append(set())
                by_free[new].add(local)
                pool.free_devices += new - old
                eq = sign * spot.eq
                pool.free_eq += eq
                class_free[pool.gpu_class] += eq
        gpu_class = alloc.gpu_class
        changes = self.changes = self.changes + 1
        versions = self.class_version
        if gpu_class in versions:
            versions[gpu_class] += 1
            self.class_changes[gpu_class] = changes
        if not alloc.counts:
            return
        kind = alloc.kind
        eq = sign * alloc.eq
        if kind is CapacityKind.RESERVED and alloc.reservation_id in self.res_used:
            self.res_used[alloc.reservation_id] -= eq
            self._refresh_idle(alloc.reservation_id)
        elif kind is CapacityKind.BORROWED:
            key = (alloc.team, gpu_class)
            self.borrowed_jobs_eq[key] = self.borrowed_jobs_eq.get(key, 0) - eq
        elif kind is CapacityKind.NOMINAL:
            key = (alloc.team, gpu_class)
            self.nominal_jobs_eq[key] = self.nominal_jobs_eq.get(key, 0) - eq
        user = (alloc.queue, alloc.user)
        user_jobs, user_eq = self.user_jobs, self.user_eq
        user_jobs[user] = user_jobs.get(user, 0) - sign
        user_eq[user] = user_eq.get(user, 0) - eq

    def _refresh_idle(self, rid: int) -> None:
        reservation = self.reservations[rid]
        idle = 0
        if self.res_active[rid]:
            idle = max(0, self.res_amount[rid] - self.res_used[rid])
        cls = reservation.gpu_class
        self.changes += 1
        if cls in self.res_idle_total:
            self.res_idle_total[cls] += idle - self.res_idle[rid]
            self.class_version[cls] += 1
            self.class_changes[cls] = self.changes
        self.res_idle[rid] = idle

    def set_reservation_active(self, rid: int, active: bool) -> None:
        self.res_active[rid] = active
        self._refresh_idle(rid)

    def set_node_eligible(self, index: int, eligible: bool) -> None:
        """A node returns from maintenance (or leaves): its free capacity joins the pools."""
        if self.node_eligible[index] == eligible:
            return
        self.node_eligible[index] = eligible
        self.eligible_changes += 1
        sign = 1 if eligible else -1
        node = self.nodes[index]
        for pool in self.node_pools[index]:
            local = pool.local_of[index]
            free = pool.free[local]
            unit = pool.unit[local]
            pool.free_eq += sign * free * unit
            pool.capacity_eq += sign * pool.total[local] * unit
            pool.outside_eq += sign * (pool.total[local] - pool.cap[local]) * unit
            if eligible:
                pool.eligible[local] = True
                while free >= len(pool.by_free):
                    pool.by_free.append(set())
                pool.by_free[max(0, free)].add(local)
                pool.free_devices += max(0, free)
            else:
                pool.by_free[max(0, free)].discard(local)
                pool.free_devices -= max(0, free)
                pool.eligible[local] = False
            self.class_free[pool.gpu_class] += sign * free * unit
        gpu = node.gpu_class
        self.changes += 1
        if gpu in self.class_capacity:
            self.class_capacity[gpu] += sign * node.gpus * self.scale
            self.class_version[gpu] += 1
            self.class_changes[gpu] = self.changes

    def note_landing(self, alloc: Alloc, start: datetime) -> None:
        """Keep (in ``landing``) that ``alloc`` starts at ``start`` on nodes not there yet, if
        it does."""
        assert self.landing is not None
        coming = self.coming_nodes
        names = sorted(
            {
                self.nodes[index].name
                for spot in alloc.spots
                if (index := spot.pool.nodes[spot.local]) in coming
            }
        )
        if names:
            self.landing[alloc.job_id] = (start, tuple(names))

    def checkpoint(self) -> Checkpoint:
        """What jobs hold, the reservations' being open and the nodes' eligibility now, with
        every aggregate of them, for ``rollback``."""
        return Checkpoint(
            now=self.now,
            pools=[
                (
                    pool,
                    list(pool.free),
                    list(pool.hbm_free),
                    [set(bucket) for bucket in pool.by_free],
                    list(pool.eligible),
                    (pool.free_devices, pool.free_eq, pool.capacity_eq, pool.outside_eq),
                )
                for pool in self.pools.values()
            ],
            node_eligible=list(self.node_eligible),
            class_free=dict(self.class_free),
            class_capacity=dict(self.class_capacity),
            class_changes=dict(self.class_changes),
            nominal_jobs_eq=dict(self.nominal_jobs_eq),
            borrowed_jobs_eq=dict(self.borrowed_jobs_eq),
            user_jobs=dict(self.user_jobs),
            user_eq=dict(self.user_eq),
            res_active=dict(self.res_active),
            res_used=dict(self.res_used),
            res_idle=dict(self.res_idle),
            res_idle_total=dict(self.res_idle_total),
            allocs=dict(self.allocs),
            class_allocs={name: dict(held) for name, held in self.class_allocs.items()},
            user_allocs={key: dict(held) for key, held in self.user_allocs.items()},
        )

    def rollback(self, saved: Checkpoint) -> None:
        """Back to ``saved``: the same holds, reservations, nodes and aggregates, in the time
        it takes to copy them rather than to give back and take again every job that changed.
        Each class's ``class_changes`` goes back with its contents (what was worked out for
        them before serves again); ``class_version`` moves on, and ``eligible_changes`` when a
        node's eligibility is put back, as with any change, so nothing worked out in between is
        taken for the state rolled back to."""
        for pool, free, hbm_free, by_free, eligible, sums in saved.pools:
            pool.free[:] = free
            pool.hbm_free[:] = hbm_free
            pool.by_free[:] = [set(bucket) for bucket in by_free]
            pool.eligible[:] = eligible
            pool.free_devices, pool.free_eq, pool.capacity_eq, pool.outside_eq = sums
        if self.node_eligible != saved.node_eligible:
            self.node_eligible[:] = saved.node_eligible
            self.eligible_changes += 1
        self.class_free = dict(saved.class_free)
        self.class_capacity = dict(saved.class_capacity)
        self.class_changes = dict(saved.class_changes)
        self.nominal_jobs_eq = dict(saved.nominal_jobs_eq)
        self.borrowed_jobs_eq = dict(saved.borrowed_jobs_eq)
        self.user_jobs = dict(saved.user_jobs)
        self.user_eq = dict(saved.user_eq)
        self.res_active = dict(saved.res_active)
        self.res_used = dict(saved.res_used)
        self.res_idle = dict(saved.res_idle)
        self.res_idle_total = dict(saved.res_idle_total)
        for alloc in self.allocs.values():
            alloc.live = False
        self.allocs = dict(saved.allocs)
        for alloc in self.allocs.values():
            alloc.live = True
        self.class_allocs = {name: dict(held) for name, held in saved.class_allocs.items()}
        self.user_allocs = {key: dict(held) for key, held in saved.user_allocs.items()}
        self.changes += 1
        for name in self.class_version:
            self.class_version[name] += 1
        self.now = saved.now

    # ------------------------------------------------------------------ reading

    def quota_total(self, key: tuple[str, str]) -> int:
        """Scaled GPU-eq the team's quota jobs (nominal and borrowed, not reserved) hold."""
        return self.nominal_jobs_eq.get(key, 0) + self.borrowed_jobs_eq.get(key, 0)

    def borrowing(self, key: tuple[str, str]) -> int:
        """Scaled GPU-eq the team uses beyond its nominal quota of the class, i.e. borrows."""
        return max(0, self.quota_total(key) - self.nominal.get(key, 0))

    def quota_use(self, key: tuple[str, str]) -> QuotaUse:
        """The team's quota use of one class, split truthfully (see ``QuotaUse``)."""
        nominal = self.nominal.get(key, 0)
        limit = self.borrow_limit.get(key, 0)
        total = self.quota_total(key)
        within = min(nominal, total)
        borrowed = min(limit, total - within)
        return QuotaUse(nominal, limit, within, borrowed, total - within - borrowed)

    def holder_reservations(self, team: str, queue: str, gpu_class: str) -> list[int]:
        """Reservations ``team`` may use for a job of ``queue`` on ``gpu_class`` (any window)."""
        holders = self.holders.get((team, gpu_class))
        if not holders:  # most teams on most classes: asked for every job check
            return []
        return [rid for rid in holders if self.reservations[rid].queue in (None, queue)]

    def reservation_headroom(self, rid: int) -> int:
        if not self.res_active[rid]:
            return 0
        return self.res_amount[rid] - self.res_used[rid]

    def usable(
        self,
        gpu_class: str,
        kind: CapacityKind,
        rid: int | None,
        lend: bool,
        own: Sequence[int] = (),
    ) -> int:
        """Free scaled GPU-eq of ``gpu_class`` a job may take: idle reserved GPUs are kept for
        their holders. The job's own team's reservations (``own``, those its queue may use) do
        not hold capacity against it, and preemptible borrowers (``lend``) may use any of it."""
        free = self.class_free[gpu_class]
        if lend:
            return free
        idle = self.res_idle_total[gpu_class]
        for mine in own:
            idle -= self.res_idle[mine]
        if kind is CapacityKind.RESERVED and rid is not None and rid not in own:
            idle -= self.res_idle[rid]
        return free - idle


# ---------------------------------------------------------------------- placement


def tolerates(pool: Pool, local: int, tolerations: frozenset[str]) -> bool:
    """Whether a request with ``tolerations`` (taint keys, ``*`` for all) may use local node
    ``local`` of ``pool``."""
    taints = pool.taints[local]
    return not taints or "*" in tolerations or taints <= tolerations


def pods_fit(
    pool: Pool,
    local: int,
    shape: Shape,
    free: Sequence[int],
    hbm_free: Sequence[int] | None = None,
) -> int:
    """How many of ``shape``'s pods fit on local node ``local`` given ``free`` devices (and, on
    a time-sliced node, ``hbm_free`` undeclared GB: the pool's own unless given)."""
    fit = free[local] // shape.devices
    if pool.mode == TIME_SLICED and shape.hbm > 0:
        memory = pool.hbm_free if hbm_free is None else hbm_free
        fit = min(fit, memory[local] // shape.hbm)
    if shape.pod_limits:
        fit = min(fit, shape.pod_limits[local])
    return fit


def place(
    pool: Pool,
    shape: Shape,
    free: Sequence[int] | None = None,
    eligible: Sequence[bool] | None = None,
    hbm_free: Sequence[int] | None = None,
    kept: Placement | None = None,
) -> Placement | None:
    """Where ``shape``'s pods go in ``pool``, or None if they do not fit.

    ``kept`` first: the nodes a head-of-queue reservation chose for the job (in an earlier pass or
    plan), where they still take its pods, so the nodes planned around it stay its own.

    One pod: best fit (the eligible node with the fewest free devices that still fit), so large
    blocks stay whole for gangs. Several pods: the fewest nodes; among placements with that many
    nodes, one inside a single rack, else a single network domain. A required topology restricts
    the choice to one domain of that scope. Ties break on node name order, so it is deterministic.
    ``free`` overrides the pool's free devices (backfill passes what the shadows ahead leave over)
    and ``eligible`` which nodes may take work (the simulation asks about nodes back from
    maintenance); ``hbm_free`` the undeclared memory of time-sliced nodes (the empty cluster's).
    """
    own = free is None and eligible is None and hbm_free is None
    view: Sequence[int] = pool.free if free is None else free
    if kept and _kept_fits(pool, shape, kept, view, eligible, hbm_free):
        return kept
    excluded = shape.excluded
    if (
        shape.pods == 1
        and own
        and not pool.tainted
        and not excluded
        and (pool.mode != TIME_SLICED or shape.hbm == 0)
    ):
        for count in range(shape.devices, len(pool.by_free)):
            bucket = pool.by_free[count]
            if bucket:
                return [(min(bucket), 1)]
        return None
    if own and shape.devices > 0:
        # the most pods the eligible nodes' free devices could take, by the buckets: a gang
        # that cannot fit by count is refused without looking at every node (the simulation
        # asks this of the same waiting gang at every event on its class)
        most = 0
        for count in range(shape.devices, len(pool.by_free)):
            most += len(pool.by_free[count]) * (count // shape.devices)
        if most < shape.pods:
            return None
    candidates: list[tuple[int, int]] = []
    total = 0
    for local, ok in enumerate(pool.eligible if eligible is None else eligible):
        if not ok or view[local] < shape.devices:
            continue
        if pool.tainted and not tolerates(pool, local, shape.tolerations):
            continue
        if excluded and local in excluded:
            continue
        fit = pods_fit(pool, local, shape, view, hbm_free)
        if fit > 0:
            candidates.append((local, fit))
            total += fit
    if total < shape.pods:
        return None
    if shape.pods == 1:
        local = min(candidates, key=lambda c: (view[c[0]], c[0]))[0]
        return [(local, 1)]
    if shape.topology is TopologyScope.NONE:
        best = _fewest(candidates, shape.pods, view)
        if best is None:
            return None
        for labels in (pool.rack, pool.domain):
            inside = _best_in_domain(candidates, shape.pods, view, labels)
            if inside is not None and len(inside) <= len(best):
                return inside
        return best
    labels = pool.rack if shape.topology is TopologyScope.RACK else pool.domain
    return _best_in_domain(candidates, shape.pods, view, labels)


def _kept_fits(
    pool: Pool,
    shape: Shape,
    kept: Placement,
    view: Sequence[int],
    eligible: Sequence[bool] | None,
    hbm_free: Sequence[int] | None,
) -> bool:
    """Whether ``kept`` still places every pod of ``shape`` (on nodes that may take them)."""
    if sum(pods for _, pods in kept) != shape.pods:
        return False
    usable = pool.eligible if eligible is None else eligible
    for local, pods in kept:
        if not usable[local] or (shape.excluded and local in shape.excluded):
            return False
        if pool.tainted and not tolerates(pool, local, shape.tolerations):
            return False
        if pods_fit(pool, local, shape, view, hbm_free) < pods:
            return False
    return True


def _fewest(
    candidates: Iterable[tuple[int, int]], pods: int, view: Sequence[int]
) -> Placement | None:
    """Fill the nodes that take the most pods first: the fewest nodes for ``pods``."""
    ordered = sorted(candidates, key=lambda c: (-c[1], view[c[0]], c[0]))
    placement: Placement = []
    left = pods
    for local, fit in ordered:
        take = min(fit, left)
        placement.append((local, take))
        left -= take
        if left == 0:
            return placement
    return None


def _best_in_domain(
    candidates: list[tuple[int, int]], pods: int, view: Sequence[int], labels: list[str]
) -> Placement | None:
    groups: dict[str, list[tuple[int, int]]] = {}
    for candidate in candidates:
        groups.setdefault(labels[candidate[0]], []).append(candidate)
    best: Placement | None = None
    for label in sorted(groups):
        placement = _fewest(groups[label], pods, view)
        if placement is not None and (best is None or len(placement) < len(best)):
            best = placement
    return best


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A copy of a ``State``'s holds and their aggregates (``State.checkpoint``)."""

    now: datetime
    # per pool: free devices, time-sliced HBM free and free-count buckets per local node, which
    # nodes count, and free devices, free / capacity / outside GPU-eq
    pools: list[
        tuple[Pool, list[int], list[int], list[set[int]], list[bool], tuple[int, int, int, int]]
    ]
    node_eligible: list[bool]
    class_free: dict[str, int]
    class_capacity: dict[str, int]
    class_changes: dict[str, int]
    nominal_jobs_eq: dict[tuple[str, str], int]
    borrowed_jobs_eq: dict[tuple[str, str], int]
    user_jobs: dict[tuple[str, str], int]
    user_eq: dict[tuple[str, str], int]
    res_active: dict[int, bool]
    res_used: dict[int, int]
    res_idle: dict[int, int]
    res_idle_total: dict[str, int]
    allocs: dict[JobId, Alloc]
    class_allocs: dict[str, dict[JobId, Alloc]]
    user_allocs: dict[tuple[str, str], dict[JobId, Alloc]]


def spots_for(pool: Pool, placement: Placement, shape: Shape) -> list[PodSpot]:
    spots: list[PodSpot] = []
    for local, count in placement:
        unit = pool.unit[local]
        for _ in range(count):
            spots.append(PodSpot(pool, local, shape.devices, shape.hbm, shape.devices * unit))
    return spots


def pods_nodes(state: State, spots: list[PodSpot]) -> tuple[str, ...]:
    return tuple(state.nodes[spot.pool.nodes[spot.local]].name for spot in spots)
