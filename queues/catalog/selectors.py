"""Every read the pages, the API and the commands need, with their query counts in mind."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.db.models import Count, F, Prefetch, Q, QuerySet, Sum

from portal.roles import is_admin
from queues.models import (
    CapabilityClass,
    GpuClass,
    Job,
    JobState,
    Node,
    NodePool,
    NodePoolQueue,
    NodeProvisioning,
    PoolNode,
    ProvisioningState,
    Queue,
    QueueEstimate,
    QueueStats,
    Team,
)
from queues.rates import share_as_decimal

if TYPE_CHECKING:
    pass


# --- The queue catalog ---------------------------------------------------------------------------


def queues_visible_to(user: User) -> QuerySet[Queue]:
    """Active queues the user may submit to (through a team); admins see every active queue.

    The queryset prefetches what the catalog shows, so listing costs a fixed number of queries.
    """
    queues = Queue.objects.active().prefetch_related(
        Prefetch("allowed_gpu_classes", queryset=GpuClass.objects.order_by("tier", "name")),
        Prefetch("allowed_capability_classes", queryset=CapabilityClass.objects.order_by("name")),
        Prefetch("teams", queryset=Team.objects.order_by("name")),
    )
    if is_admin(user):
        return queues
    return queues.filter(Q(teams__members=user) & Q(teams__active=True)).distinct()


def with_pool_terms(queues: QuerySet[Queue]) -> QuerySet[Queue]:
    """``queues`` with their terms on node pools (may add nodes, warm floor) for the pages."""
    return queues.prefetch_related(
        Prefetch(
            "pool_terms",
            queryset=NodePoolQueue.objects.filter(pool__active=True)
            .select_related("pool__gpu_class")
            .order_by("pool__name"),
        )
    )


def teams_for(user: User) -> QuerySet[Team]:
    """The active teams ``user`` is a member of, by name."""
    return Team.objects.active().filter(members=user).order_by("name")


# --- Jobs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueEntry:
    """One pending job in a queue's plan order, as anyone who may see the queue sees it: other
    teams' jobs show their shape and reason, not their names, commands or images."""

    position: int | None
    job: Job
    mine: bool

    @property
    def label(self) -> str:
        return (self.job.name or f"job {self.job.pk}") if self.mine else "another team's job"


def queue_pending(queue: Queue, user: User, *, limit: int = 100) -> tuple[list[QueueEntry], int]:
    """The first ``limit`` of the queue's pending jobs in plan order (position), those of the
    user's teams named, and how many wait in all."""
    teams = set(Team.objects.filter(members=user).values_list("pk", flat=True))
    pending = Job.objects.filter(queue=queue, state=JobState.PENDING)
    first = (
        pending.select_related("team", "queue", "capability_class")
        .defer("command", "args", "env", "image")
        .order_by(F("position").asc(nulls_last=True), "submitted_at", "id")[:limit]
    )
    entries = [QueueEntry(j.position, j, is_admin(user) or j.team_id in teams) for j in first]
    return entries, pending.count()  # always asked: the page costs the same however many wait


# --- The catalog's live state --------------------------------------------------------------------


@dataclass(frozen=True)
class QueueLive:
    """What a queue looks like now: its expected wait for the viewer's teams against its target
    (likely, and at the latest: the forecast the job pages show),
    historical waits, how many jobs wait and run, and free GPU-equivalents per allowed class."""

    expected_wait: timedelta | None
    expected_note: str  # why it is unknown; beside a wait, that it is projected
    wait_p50: timedelta | None
    wait_p90: timedelta | None
    pending: int
    running: int
    free: dict[str, Decimal]
    # Allowed classes with GPUs out of service: (class, GPUs in maintenance, GPUs unhealthy).
    out_of_service: list[tuple[str, int, int]] = field(default_factory=list)
    # Every allowed class's GPUs by node state, and GPU-equivalents pods of others hold.
    capacity: list[CapacityByState] = field(default_factory=list)
    # The same forecast's bound: the wait if every job runs to its runtime limit.
    expected_wait_latest: timedelta | None = None

    @property
    def used_outside(self) -> list[CapacityByState]:
        """The allowed classes some of whose GPUs pods the portal did not create hold."""
        return [c for c in self.capacity if c.used_outside]


def percentile(values: list[timedelta], fraction: float) -> timedelta | None:
    """Nearest-rank percentile (None without data)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def free_gpu_equivalents(now: datetime) -> dict[str, Decimal]:
    """Free GPU-equivalents per GPU class: healthy, in-service capacity minus what pods hold
    (the portal's and others'). A fixed number of queries, and the database sums the devices
    held on classes without time-sliced nodes (every reconcile runs this over thousands of
    running jobs)."""
    free: dict[str, Fraction] = defaultdict(Fraction)
    replicas: dict[str, int] = {}
    sliced: set[int] = set()  # classes with a time-sliced node: a pod's share depends on its node
    classes = {g.pk: g for g in GpuClass.objects.all()}
    for (
        name,
        class_id,
        healthy,
        maintenance,
        mig_layout,
        gpu_count,
        slices,
        outside,
    ) in Node.objects.filter(gpu_class__isnull=False).values_list(
        "name",
        "gpu_class_id",
        "healthy",
        "maintenance",
        "mig_layout",
        "gpu_count",
        "time_slice_replicas",
        "gpus_used_outside",
    ):
        replicas[name] = slices
        if slices > 1:
            sliced.add(class_id)
        if not healthy or maintenance:
            continue
        gpu_class = classes[class_id]
        capacity = gpu_class.node_capacity(gpu_count, mig_layout)
        free[gpu_class.name] += capacity - Fraction(str(outside))

    holding = Job.objects.holding_gpus().filter(gpu_class__isnull=False).order_by()
    for class_id, mig_profile, devices in (
        holding.exclude(gpu_class_id__in=sliced)
        .values("gpu_class_id", "mig_profile")
        .annotate(devices=Sum(F("gpus_per_pod") * F("pods")))
        .values_list("gpu_class_id", "mig_profile", "devices")
    ):
        gpu_class = classes[class_id]
        free[gpu_class.name] -= devices * gpu_class.device_share(mig_profile, 1)
    for class_id, mig_profile, gpus_per_pod, pods, nodes in holding.filter(
        gpu_class_id__in=sliced
    ).values_list("gpu_class_id", "mig_profile", "gpus_per_pod", "pods", "nodes"):
        gpu_class = classes[class_id]
        node_replicas = max((replicas.get(n, 1) for n in nodes), default=1)
        free[gpu_class.name] -= (
            gpus_per_pod * pods * gpu_class.device_share(mig_profile, node_replicas)
        )
    return {
        name: share_as_decimal(max(v, Fraction(0))).quantize(Decimal("0.01"))
        for name, v in free.items()
    }


def queues_live(queues: list[Queue], user: User, *, now: datetime) -> dict[int, QueueLive]:
    """The live state of ``queues`` as ``user`` sees it (expected wait: the soonest of their
    teams'), as of the last reconcile: four queries however many queues and jobs."""
    ids = [q.pk for q in queues]
    down = {c.gpu_class: c for c in capacity_by_state()}
    team_ids = set(Team.objects.filter(members=user).values_list("pk", flat=True))
    estimates: dict[int, list[tuple[datetime | None, datetime | None, str]]] = defaultdict(list)
    for queue_id, team_id, start, likely, note in QueueEstimate.objects.filter(
        queue_id__in=ids
    ).values_list("queue_id", "team_id", "estimated_start", "likely_start", "note"):
        if team_id in team_ids or is_admin(user):
            estimates[queue_id].append((start, likely or start, note))
    stats = {st.queue_id: st for st in QueueStats.objects.filter(queue_id__in=ids)}
    live = {}
    for queue in queues:
        # the soonest of the viewer's teams: its likely start and its bound, one team's pair
        known = sorted((likely, s, n) for s, likely, n in estimates[queue.pk] if s and likely)
        # beside a start, its note says whether it is projected (a long queue's far end)
        soonest, latest, told = known[0] if known else (None, None, "")
        notes = [n for s, _, n in estimates[queue.pk] if s is None and n]
        st = stats.get(queue.pk)
        free = st.free if st else {}
        live[queue.pk] = QueueLive(
            expected_wait=max(soonest - now, timedelta(0)) if soonest else None,
            expected_wait_latest=max(latest - now, timedelta(0)) if latest else None,
            expected_note=told if soonest else (notes[0] if notes else "no estimate yet"),
            wait_p50=st.wait_p50 if st else None,
            wait_p90=st.wait_p90 if st else None,
            pending=st.pending if st else 0,
            running=st.running if st else 0,
            free={g.name: Decimal(free.get(g.name, "0")) for g in queue.allowed_gpu_classes.all()},
            out_of_service=[
                (g.name, down[g.name].maintenance, down[g.name].unhealthy)
                for g in queue.allowed_gpu_classes.all()
                if g.name in down and (down[g.name].maintenance or down[g.name].unhealthy)
            ],
            capacity=[down[g.name] for g in queue.allowed_gpu_classes.all() if g.name in down],
        )
    return live


@dataclass(frozen=True)
class CapacityByState:
    """Physical GPUs of one class by the state of their node: in service, in maintenance
    (cordoned or drained), unhealthy (unhealthy wins when a node is both)."""

    gpu_class: str
    in_service: int
    maintenance: int
    unhealthy: int
    used_outside: Decimal = Decimal(0)  # GPU-equivalents held by pods the portal did not create

    @property
    def total(self) -> int:
        return self.in_service + self.maintenance + self.unhealthy


def capacity_by_state() -> list[CapacityByState]:
    """Every GPU class's physical GPUs by node state, from the node mirror (one query)."""
    counts: dict[str, dict[str, int]] = defaultdict(
        lambda: {"in service": 0, "maintenance": 0, "unhealthy": 0}
    )
    outside: dict[str, Decimal] = defaultdict(Decimal)
    for name, gpus, healthy, maintenance, used_outside in Node.objects.filter(
        gpu_class__isnull=False
    ).values_list("gpu_class__name", "gpu_count", "healthy", "maintenance", "gpus_used_outside"):
        state = "unhealthy" if not healthy else "maintenance" if maintenance else "in service"
        counts[name][state] += gpus
        outside[name] += used_outside
    return [
        CapacityByState(
            gpu_class=name,
            in_service=c["in service"],
            maintenance=c["maintenance"],
            unhealthy=c["unhealthy"],
            used_outside=outside[name],
        )
        for name, c in sorted(counts.items())
    ]


def queue_stats_compute(*, now: datetime) -> dict[int, dict[str, Any]]:
    """Every active queue's numbers for ``QueueStats`` (the reconcile stores them)."""
    queues = list(Queue.objects.active().prefetch_related("allowed_gpu_classes"))
    ids = [q.pk for q in queues]
    counts: dict[tuple[int, str], int] = {
        (row["queue_id"], row["state"]): row["n"]
        for row in Job.objects.filter(
            queue_id__in=ids, state__in=(JobState.PENDING, JobState.RUNNING)
        )
        .values("queue_id", "state")
        .annotate(n=Count("id"))
    }
    waits: dict[int, list[timedelta]] = defaultdict(list)
    # The wait as one column, subtracted by the database: a busy day's thousands of rows
    # each converted one value, not two timestamps, every cycle.
    for queue_id, wait in (
        Job.objects.admitted_recently(now)
        .filter(queue_id__in=ids)
        .order_by()
        .values_list("queue_id", F("admitted_at") - F("submitted_at"))
    ):
        waits[queue_id].append(wait)
    free = free_gpu_equivalents(now)
    return {
        q.pk: {
            "free": {
                g.name: str(free.get(g.name, Decimal(0))) for g in q.allowed_gpu_classes.all()
            },
            "wait_p50": percentile(waits[q.pk], 0.5),
            "wait_p90": percentile(waits[q.pk], 0.9),
            "pending": counts.get((q.pk, JobState.PENDING), 0),
            "running": counts.get((q.pk, JobState.RUNNING), 0),
        }
        for q in queues
    }


# --- Charts' numbers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassAvailability:
    """One GPU class now: GPUs in service and the GPU-equivalents of them free."""

    gpu_class: str
    in_service: int
    free: Decimal


def class_availability(classes: list[str], live: list[QueueLive]) -> list[ClassAvailability]:
    """Free against in-service GPUs for each of ``classes``, from the queues' live numbers (the
    same free amounts their cards show) and the node mirror (one query)."""
    in_service = {c.gpu_class: c.in_service for c in capacity_by_state()}
    free: dict[str, Decimal] = {}
    for numbers in live:
        free.update(numbers.free)
    return [
        ClassAvailability(name, in_service.get(name, 0), free.get(name, Decimal(0)))
        for name in classes
    ]


@dataclass(frozen=True)
class PastWait:
    job_id: int
    admitted_at: datetime
    wait: timedelta


def queue_wait_history(queue: Queue, *, now: datetime, limit: int = 500) -> list[PastWait]:
    """The queue's jobs admitted within the wait history window (the waits its p50 and p90
    are taken from), oldest first; at most the last ``limit``."""
    rows = (
        Job.objects.admitted_recently(now)
        .filter(queue=queue)
        .order_by("-admitted_at")
        .values_list("pk", "submitted_at", "admitted_at")[:limit]
    )
    return [
        PastWait(pk, admitted, admitted - submitted)
        for pk, submitted, admitted in rows
        if admitted is not None  # admitted_recently admits no other
    ][::-1]


@dataclass(frozen=True)
class FreeDevices:
    """One GPU class's free devices as people count them: whole GPUs, MIG slices by profile,
    time-slice replicas (``per_gpu`` of them make a GPU)."""

    gpus: int = 0
    slices: dict[str, int] = field(default_factory=dict)
    replicas: int = 0
    per_gpu: int = 1


def free_devices() -> dict[str, FreeDevices]:
    """Free devices per GPU class on healthy, in-service nodes, minus what pods hold (the
    portal's and others'): the same rule as ``free_gpu_equivalents``, in devices instead of
    GPU-equivalents. Two queries."""
    gpus: dict[str, int] = defaultdict(int)
    slices: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    replicas: dict[str, int] = defaultdict(int)
    per_gpu: dict[str, int] = {}
    sliced: set[str] = set()
    for name, healthy, maintenance, layout, count, node_replicas, outside in Node.objects.filter(
        gpu_class__isnull=False
    ).values_list(
        "gpu_class__name",
        "healthy",
        "maintenance",
        "mig_layout",
        "gpu_count",
        "time_slice_replicas",
        "outside_devices",
    ):
        gpus.setdefault(name, 0)
        if node_replicas > 1:
            sliced.add(name)
            per_gpu[name] = node_replicas
        if not healthy or maintenance:
            continue
        outside = outside or {}
        if layout:
            for profile, n in layout.items():
                slices[name][profile] += n - int(outside.get(profile, 0))
        elif node_replicas > 1:
            replicas[name] += count * node_replicas - int(outside.get("gpu", 0))
        else:
            gpus[name] += count - int(outside.get("gpu", 0))
    for name, profile, devices in (
        Job.objects.holding_gpus()
        .filter(gpu_class__isnull=False)
        .order_by()
        .values("gpu_class__name", "mig_profile")
        .annotate(devices=Sum(F("gpus_per_pod") * F("pods")))
        .values_list("gpu_class__name", "mig_profile", "devices")
    ):
        if profile:
            slices[name][profile] -= devices
        elif name in sliced:
            replicas[name] -= devices
        else:
            gpus[name] -= devices
    return {
        name: FreeDevices(
            gpus=max(gpus[name], 0),
            slices={p: n for p, n in sorted(slices[name].items()) if n > 0},
            replicas=max(replicas[name], 0),
            per_gpu=per_gpu.get(name, 1),
        )
        for name in set(gpus) | set(slices) | set(replicas)
    }


@dataclass(frozen=True)
class PoolNow:
    """A node pool as the catalog shows it: its nodes ready, being provisioned and still
    possible, how long a new one takes, and the queues' warm floors on it."""

    name: str
    gpu_class: str
    node_gpus: int
    ready: int
    provisioning: int
    possible: int
    lead_median: timedelta
    lead_p90: timedelta
    learned_from: int
    warm: list[tuple[str, int]]
    scale_up: list[str]
    last_failure: str


def node_pools_now(classes: list[str]) -> list[PoolNow]:
    """The active node pools of ``classes`` (every pool when empty), by name."""
    pools = (
        NodePool.objects.active()
        .select_related("gpu_class")
        .prefetch_related("queue_terms__queue")
        .order_by("name")
    )
    if classes:
        pools = pools.filter(gpu_class__name__in=classes)
    found = []
    for pool in pools:
        ready = PoolNode.objects.filter(pool=pool, removed_at__isnull=True).count()
        coming = sum(
            max(0, nodes - len(came))
            for nodes, came in NodeProvisioning.objects.filter(
                pool=pool, state=ProvisioningState.PROVISIONING
            ).values_list("nodes", "nodes_ready")
        )
        latest = NodeProvisioning.objects.filter(pool=pool).order_by("-requested_at", "-id").first()
        median, p90, learned = pool.lead_times()
        terms = sorted(
            (t for t in pool.queue_terms.all() if t.queue.active), key=lambda t: t.queue.name
        )
        found.append(
            PoolNow(
                name=pool.name,
                gpu_class=pool.gpu_class.name,
                node_gpus=pool.node_gpus,
                ready=ready,
                provisioning=coming,
                possible=max(0, pool.max_nodes - ready - coming),
                lead_median=median,
                lead_p90=p90,
                learned_from=learned,
                warm=[(t.queue.name, t.warm_nodes) for t in terms if t.warm_nodes],
                scale_up=[t.queue.name for t in terms if t.may_scale_up],
                last_failure=latest.failure
                if latest is not None and latest.state == ProvisioningState.FAILED
                else "",
            )
        )
    return found
