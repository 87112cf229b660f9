"""The admission engine's input: one frozen picture of the cluster and its policy.

Everything here is plain data. The Django glue builds a ``Snapshot`` from database rows and the
cluster adapter's view; the engine reads it and never mutates it.

Conventions the glue must follow:

* Quantities of GPU capacity are GPU-equivalents as ``Fraction`` (a whole GPU is 1, a MIG slice
  its share, a time-slice replica ``1 / replicas``).
* Times are aware UTC datetimes, durations ``timedelta``.
* Nodes carry *capacity and what pods the portal did not create hold*; the engine derives what
  the portal's own jobs hold from ``Snapshot.running`` (their pod placement), so free capacity is
  never counted twice.
* A node is in exactly one mode, derived from its fields: MIG when ``mig`` is non-empty (all its
  GPUs are partitioned and it serves only MIG requests), time-sliced when
  ``time_slice_replicas > 1``, otherwise exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from typing import Any

from queues.admission.capability import CapabilityRequest, GpuClassSpec

JobId = int
ReservationId = int
# In the name of a node a node pool has not brought yet (queues/admission/elastic.py shows them
# to the planner); never in a Kubernetes name, so never a real node's.
COMING_MARK = "~"
# The taint key prefix elastic.py puts (in the planner's view only) on empty nodes a queue's warm
# floor holds: ``gpuportal.io/warm-for-<queue>``.
WARM_TAINT = "gpuportal.io/warm-for-"


class PreemptionClass(StrEnum):
    """Whether a queue's jobs may be preempted, as published in its terms."""

    NEVER = "never"
    GRACEFUL = "graceful"
    PREEMPTIBLE = "preemptible"


def borrowing_allowed(*, may_borrow: bool, preemption: str) -> bool:
    """Whether a queue's jobs may borrow: borrowed GPUs are reclaimed by preemption, so only
    work that may be preempted (graceful or preemptible) may borrow. The one rule; the policy
    refuses a queue that asks otherwise, and a database constraint guards the stored rows."""
    return may_borrow and preemption != PreemptionClass.NEVER


class SharingMode(StrEnum):
    """How a queue's jobs hold GPUs."""

    EXCLUSIVE = "exclusive"
    MIG = "mig"
    TIME_SLICED = "time-sliced"


class MaintenanceState(StrEnum):
    """A node's maintenance state; anything but ``NONE`` keeps new work off the node."""

    NONE = "none"
    CORDONED = "cordoned"
    DRAINING = "draining"


class TopologyScope(StrEnum):
    """The placement domain a queue may require for its multi-pod jobs."""

    NONE = "none"
    RACK = "rack"
    NETWORK_DOMAIN = "network_domain"


class CapacityKind(StrEnum):
    """What entitles a job to the GPUs it holds (docs/concepts.md, "Borrowing")."""

    NOMINAL = "nominal"
    BORROWED = "borrowed"
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Forecast:
    """How long a job is expected to run, as fractions of its runtime limit learned from the
    history of similar jobs: ``likely`` the prediction, ``low``/``high`` its 10th/90th
    percentiles. Each in (0, 1]: a job never runs past its limit. Without history the glue
    passes none and the engine assumes the limit (``NO_HISTORY``)."""

    likely: float
    low: float
    high: float

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.likely <= self.high <= 1:
            raise ValueError("Forecast needs 0 < low <= likely <= high <= 1")


NO_HISTORY = Forecast(1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class GpuClass:
    """A GPU class with the billing weight of the rate card in force (fair share uses it)."""

    spec: GpuClassSpec
    weight: Fraction = Fraction(1)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class MigSlots:
    """One MIG profile on a node: slices in the layout, and how many pods the portal did not
    create hold (the engine subtracts the portal's own jobs itself)."""

    profile: str
    total: int
    outside: int = 0


@dataclass(frozen=True, slots=True)
class Node:
    """The portal's mirror of one GPU node.

    ``taints`` lists only taints the portal's pods do not tolerate by default, written
    ``key=value:Effect`` or ``key:Effect``; a queue lists the keys it tolerates.
    ``outside_gpu_eq`` is what pods the portal did not create hold on an exclusive or time-sliced
    node (rounded up to whole GPUs, resp. replicas); on a MIG node use ``MigSlots.outside``.
    """

    name: str
    gpu_class: str
    gpus: int
    mig: tuple[MigSlots, ...] = ()
    time_slice_replicas: int = 1
    rack: str = ""
    network_domain: str = ""
    taints: tuple[str, ...] = ()
    healthy: bool = True
    health_reason: str = ""
    maintenance: MaintenanceState = MaintenanceState.NONE
    maintenance_reason: str = ""
    maintenance_until: datetime | None = None
    outside_gpu_eq: Fraction = Fraction(0)
    cpu_millicores: int = 0  # allocatable; 0: unknown (then any pod's ask fits)
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue (service class) with all its published terms.

    Empty ``gpu_classes``, ``capability_classes`` or ``teams`` mean "any". Limits set to ``None``
    are unlimited. ``grace_period`` is what a preempted job of this queue gets.
    """

    name: str
    priority: int = 0
    preemption: PreemptionClass = PreemptionClass.NEVER
    grace_period: timedelta = timedelta(0)
    sharing: SharingMode = SharingMode.EXCLUSIVE
    gpu_classes: tuple[str, ...] = ()
    capability_classes: tuple[str, ...] = ()
    max_runtime: timedelta = timedelta(hours=24)
    default_runtime: timedelta = timedelta(hours=1)
    checkpoint_interval: timedelta | None = None
    max_gpu_eq_per_job: Fraction | None = None
    max_running_jobs_per_user: int | None = None
    max_gpu_eq_per_user: Fraction | None = None
    may_borrow: bool = False
    reservation_only: bool = False
    required_topology: TopologyScope = TopologyScope.NONE
    teams: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()
    recent_waits: tuple[timedelta, ...] = ()
    forecast: Forecast | None = None  # how long its jobs run, from history (its default job's)

    @property
    def can_borrow(self) -> bool:
        return borrowing_allowed(may_borrow=self.may_borrow, preemption=self.preemption)

    @property
    def caps_users(self) -> bool:
        """Whether it limits what one user may run (jobs or GPU-equivalents)."""
        return self.max_running_jobs_per_user is not None or self.max_gpu_eq_per_user is not None


@dataclass(frozen=True, slots=True)
class Quota:
    """A team's guarantee (``nominal``) and extra it may borrow for one GPU class."""

    gpu_class: str
    nominal: Fraction
    borrowing_limit: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True)
class Team:
    """A tenant. ``recent_usage`` is its decayed normalized GPU-hours (fair share divides it by
    ``weight``)."""

    name: str
    weight: Fraction = Fraction(1)
    quotas: tuple[Quota, ...] = ()
    recent_usage: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity guaranteed to a team (optionally one queue) for a window; both ends ``None``
    means standing. ``start`` inclusive, ``end`` exclusive."""

    id: ReservationId
    team: str
    gpu_class: str
    amount: Fraction
    queue: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    name: str = ""  # as people know it (reasons name it); empty: its id is all there is

    @property
    def label(self) -> str:
        """``reservation nlp-conference-run`` (``reservation 3`` without a name)."""
        return f"reservation {self.name or self.id}"

    def active_at(self, when: datetime) -> bool:
        return (self.start is None or self.start <= when) and (self.end is None or when < self.end)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs: running, or admitted and not yet started (``started_at`` None).

    ``pods`` names the node of each pod; each pod holds ``gpu_eq_per_pod`` (a MIG pod's devices
    are ``gpu_eq_per_pod / share``, a time-sliced pod's ``gpu_eq_per_pod * replicas``).
    ``memory_gb`` is the declared GPU memory per pod (time-sliced work; None = an even share of
    the GPU). ``unschedulable`` keeps the cluster scheduler's message for an admitted job it
    cannot place. Preemption class and sharing come from its queue.
    """

    id: JobId
    team: str
    user: str
    queue: str
    gpu_class: str
    pods: tuple[str, ...]
    gpu_eq_per_pod: Fraction
    runtime_limit: timedelta
    started_at: datetime | None = None
    priority: int = 0
    mig_profile: str | None = None
    memory_gb: int | None = None
    last_checkpoint: datetime | None = None
    checkpoint_interval: timedelta | None = None
    capacity: CapacityKind = CapacityKind.NOMINAL
    reservation_id: ReservationId | None = None
    unschedulable: str = ""
    # Ended (cancelled, preempted, failed) with its pods still stopping: it holds its GPUs
    # until they are gone and cannot be preempted. ``started_at`` is then when it was stopped
    # and ``runtime_limit`` its grace period: their sum is when the pods are gone at the latest.
    terminating: bool = False
    forecast: Forecast | None = None

    @property
    def gpu_eq(self) -> Fraction:
        return self.gpu_eq_per_pod * len(self.pods)


@dataclass(frozen=True, slots=True)
class PlannedNodes:
    """The nodes a plan's head-of-queue reservation chose for a waiting job on ``gpu_class``:
    one node name per pod (``Plan.planned_nodes``). Passed back with the job in the next
    snapshot (``PendingJob.planned_nodes``), the job starts there, and is reserved there again,
    where they still fit."""

    gpu_class: str
    nodes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_class": self.gpu_class, "nodes": list(self.nodes)}


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting for admission.

    ``gpus_per_pod`` counts devices: whole GPUs (exclusive), slices of the capability class's MIG
    profile, or time-slice replicas. ``memory_gb`` is the declared GPU memory per pod for
    time-sliced work. ``runtime_limit`` None means the queue's default runtime.

    ``cpu_millicores`` and ``memory_mib`` are what each pod asks besides GPUs (0: nothing). The
    engine does not count them as used, but never picks a GPU class none of whose nodes could
    hold such a pod.

    ``not_before`` holds it back until then: the cluster could not start it ``rollbacks`` times
    in a row after admission (for reasons the engine does not model, such as CPU or memory the
    nodes lack), and ``unschedulable`` is what the cluster's scheduler said the last time.

    ``planned_nodes``: where the previous plan reserved its start (``Plan.planned_nodes``).
    """

    id: JobId
    queue: str
    team: str
    user: str
    capability: str
    submitted_at: datetime
    pods: int = 1
    gpus_per_pod: int = 1
    memory_gb: int | None = None
    runtime_limit: timedelta | None = None
    priority: int = 0
    attempts: int = 0
    cpu_millicores: int = 0
    memory_mib: int = 0
    not_before: datetime | None = None
    rollbacks: int = 0
    unschedulable: str = ""
    forecast: Forecast | None = None
    planned_nodes: PlannedNodes | None = None


@dataclass(frozen=True, slots=True)
class NodePool:
    """Nodes of one GPU class that a provisioner adds on request (docs/cluster.md, "Node
    pools"). ``template`` is the shape of one new node (its name is not used). ``members``
    names the pool's nodes in ``Snapshot.nodes``; ``provisioning`` holds, per node asked for
    and not yet come, when it was asked for. A new node is Ready ``lead_median`` after it is
    asked for, ``lead_p90`` at the latest nine times in ten. ``scale_up_queues`` may have nodes
    added for their jobs; ``warm_floors`` keeps, per queue, that many of the class's nodes
    ready for it: the nodes its jobs run on count, and up to the rest are held empty for it.
    """

    name: str
    gpu_class: str
    max_nodes: int
    template: Node
    lead_median: timedelta
    lead_p90: timedelta
    min_nodes: int = 0
    members: tuple[str, ...] = ()
    provisioning: tuple[datetime, ...] = ()
    scale_up_queues: tuple[str, ...] = ()
    warm_floors: tuple[tuple[str, int], ...] = ()
    scale_down_delay: timedelta = timedelta(minutes=10)

    @property
    def headroom(self) -> int:
        """How many more nodes the pool may be asked for."""
        return max(0, self.max_nodes - len(self.members) - len(self.provisioning))


@dataclass(frozen=True)
class Snapshot:
    """Everything the engine needs for one decision. The engine never mutates it.

    ``probes`` are hypothetical jobs whose estimated start the portal wants to publish (a queue's
    current expected wait for its default job, see ``default_probe``). A probe is never admitted,
    never preempts, and never changes what happens to a real job; it is ordered as if submitted at
    ``now`` (its own ``submitted_at`` is ignored) behind every real job of higher or equal order.
    Probe ids must be unique among probes; they may repeat real job ids (answers are kept apart).
    """

    now: datetime
    gpu_classes: tuple[GpuClass, ...]
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    capability_classes: tuple[CapabilityRequest, ...]
    teams: tuple[Team, ...]
    reservations: tuple[Reservation, ...] = ()
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    cluster_unreachable_since: datetime | None = None
    probes: tuple[PendingJob, ...] = ()
    node_pools: tuple[NodePool, ...] = ()  # empty: a fixed cluster (see ``NodePool``)

    def __post_init__(self) -> None:
        if self.now.tzinfo is None:
            raise ValueError("Snapshot.now must be an aware UTC datetime")
        if len({probe.id for probe in self.probes}) != len(self.probes):
            raise ValueError("Snapshot.probes must have unique ids")
