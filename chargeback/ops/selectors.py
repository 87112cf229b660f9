"""What /ops/ and /metrics read: the operations history the reconcile records
(``queues.reconcile.history``), the mirror's nodes, the catalog's queue numbers, and
chargeback's waste and exact capacity split. Every over-time figure reads pre-aggregated rows;
nothing here scans a month of jobs (docs/operations-dashboard.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from django.core.paginator import Page, Paginator
from django.db.models import Case, Count, F, Max, QuerySet, Sum, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import TruncDay, TruncHour

from queues.models import (
    CapacityHour,
    CapacitySample,
    ClusterStatus,
    FairShareSettings,
    GpuClass,
    Job,
    JobState,
    MetricCounter,
    Node,
    PendingSample,
    Queue,
    QueueStats,
    QueueWaitDay,
    Quota,
    RateCard,
    Team,
    TeamStats,
)
from queues.operations.selectors import quota_use
from queues.rates import gpu_amount

Bucket = Literal["hour", "day"]
STATES = ("in_use", "free", "reserved_idle", "unhealthy", "maintenance", "outside")
STATE_LABELS = {
    "in_use": "in use",
    "free": "free",
    "reserved_idle": "reserved, idle",
    "unhealthy": "unhealthy",
    "maintenance": "maintenance",
    "outside": "used outside the portal",
}
MINUTES_PER_HOUR = Decimal(60)
HOURS_PLACES = Decimal("0.001")


def _truncate(bucket: Bucket) -> TruncHour | TruncDay:
    return (TruncHour if bucket == "hour" else TruncDay)("at", tzinfo=UTC)


# --- Capacity by state -----------------------------------------------------------------------


def latest_minute() -> datetime | None:
    """The minute of the reconcile's latest capacity sample ("now" on the dashboard)."""
    return CapacitySample.objects.aggregate(at=Max("at"))["at"]


def capacity_samples_at(minute: datetime | None) -> list[CapacitySample]:
    """Each GPU class's sample at ``minute`` (GPU-equivalents by state, fragmentation)."""
    if minute is None:
        return []
    return list(
        CapacitySample.objects.filter(at=minute)
        .select_related("gpu_class")
        .order_by("gpu_class__name")
    )


@dataclass(frozen=True)
class CapacityPeriod:
    """One GPU class's GPU-hours by state in one hour or day (a sample is one minute)."""

    gpu_class: str
    start: datetime
    hours: dict[str, Decimal]

    @property
    def allocatable(self) -> Decimal:
        """GPU-hours the portal could allocate: in service, not held by others."""
        return self.hours["in_use"] + self.hours["free"] + self.hours["reserved_idle"]

    @property
    def allocation(self) -> Decimal | None:
        """Allocated over allocatable GPU-hours, as a percentage to one decimal."""
        if not self.allocatable:
            return None
        return (self.hours["in_use"] * 100 / self.allocatable).quantize(Decimal("0.1"))


def capacity_over_time(*, start: datetime, end: datetime, bucket: Bucket) -> list[CapacityPeriod]:
    """GPU-hours by state per class and hour or day of [``start``, ``end``) (``start`` on an
    hour): the sum of the minute samples' GPU-equivalents over 60. Hours the reconcile has
    rolled up are read from ``CapacityHour``, the rest from the samples themselves. A minute
    without a sample (no reconcile ran) counts in no state."""
    sums: dict[tuple[str, datetime], dict[str, Decimal]] = defaultdict(
        lambda: dict.fromkeys(STATES, Decimal(0))
    )

    def period(hour: datetime) -> datetime:
        return hour if bucket == "hour" else hour.replace(hour=0)

    rolled = CapacityHour.objects.filter(hour__gte=start, hour__lt=end)
    last = rolled.aggregate(last=Max("hour"))["last"] or start - timedelta(hours=1)
    truncate = (TruncHour if bucket == "hour" else TruncDay)("hour", tzinfo=UTC)
    hourly: Iterable[Any] = (
        rolled.annotate(period=truncate)
        .values("gpu_class__name", "period")
        .annotate(**{f"sum_{s}": Sum(s) for s in STATES})
        .order_by()
    )
    for row in hourly:
        key = (row["gpu_class__name"], row["period"])
        for s in STATES:
            sums[key][s] += row[f"sum_{s}"]
    recent: Iterable[Any] = (
        CapacitySample.objects.filter(at__gte=last + timedelta(hours=1), at__lt=end)
        .annotate(hour=TruncHour("at", tzinfo=UTC))
        .values("gpu_class__name", "hour")
        .annotate(**{f"sum_{s}": Sum(s) for s in STATES})
        .order_by()
    )
    for row in recent:
        key = (row["gpu_class__name"], period(row["hour"]))
        for s in STATES:
            sums[key][s] += row[f"sum_{s}"] or Decimal(0)
    return [
        CapacityPeriod(
            gpu_class=name,
            start=at,
            hours={s: (v[s] / MINUTES_PER_HOUR).quantize(HOURS_PLACES) for s in STATES},
        )
        for (name, at), v in sorted(sums.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


# --- Fragmentation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FragmentationPoint:
    gpu_class: str
    at: datetime
    free: Decimal
    slots: dict[str, int]


def fragmentation_over_time(*, start: datetime, end: datetime) -> list[FragmentationPoint]:
    """Each class's unheld GPUs (free and reserved-idle) and gang slots on the hour (the
    sample of minute 0) in [``start``, ``end``)."""
    return [
        FragmentationPoint(name, at, free + reserved, {k: int(v) for k, v in slots.items()})
        for name, at, free, reserved, slots in CapacitySample.objects.filter(
            at__gte=start, at__lt=end, at__minute=0
        )
        .order_by("at", "gpu_class__name")
        .values_list("gpu_class__name", "at", "free", "reserved_idle", "slots")
    ]


# --- Pending jobs and waits ------------------------------------------------------------------


def pending_now(minute: datetime | None) -> list[tuple[str, str, int]]:
    """(queue, binding reason, jobs) at ``minute``, most jobs first."""
    if minute is None:
        return []
    return list(
        PendingSample.objects.filter(at=minute)
        .order_by("-jobs", "queue__name", "code")
        .values_list("queue__name", "code", "jobs")
    )


def pending_over_time(
    *, start: datetime, end: datetime, bucket: Bucket
) -> dict[str, list[tuple[datetime, Decimal]]]:
    """Per binding reason, the average number of jobs waiting on it in each hour or day: jobs
    summed over the period's minute samples, divided by the minutes the reconcile sampled."""
    minutes = {
        row["period"]: row["n"]
        for row in CapacitySample.objects.filter(at__gte=start, at__lt=end)
        .annotate(period=_truncate(bucket))
        .values("period")
        .annotate(n=Count("at", distinct=True))
    }
    series: dict[str, list[tuple[datetime, Decimal]]] = defaultdict(list)
    for row in (
        PendingSample.objects.filter(at__gte=start, at__lt=end)
        .annotate(period=_truncate(bucket))
        .values("code", "period")
        .annotate(jobs=Sum("jobs"))
        .order_by("code", "period")
    ):
        sampled = minutes.get(row["period"]) or 1
        series[row["code"]].append(
            (row["period"], (Decimal(row["jobs"]) / sampled).quantize(Decimal("0.1")))
        )
    return dict(series)


@dataclass(frozen=True)
class Waiter:
    job_id: int
    queue: str
    team: str
    submitted_at: datetime
    waited: timedelta
    code: str
    message: str


def longest_waiters(*, now: datetime, limit: int = 10) -> list[Waiter]:
    """The jobs pending longest, with their binding reason."""
    rows = (
        Job.objects.filter(state=JobState.PENDING)
        .order_by("submitted_at", "id")
        .annotate(code=KT("pending_reasons__0__code"), message=KT("pending_reasons__0__message"))
        .values_list("id", "queue__name", "team__name", "submitted_at", "code", "message")[:limit]
    )
    return [
        Waiter(job_id, queue, team, submitted, now - submitted, code or "", message or "")
        for job_id, queue, team, submitted, code, message in rows
    ]


@dataclass(frozen=True)
class QueueWaits:
    """A queue's published target against its past waits (the catalog's p50/p90 over its
    history window) and its SLO compliance per day."""

    queue: str
    target: timedelta
    wait_p50: timedelta | None
    wait_p90: timedelta | None
    pending: int
    days: list[QueueWaitDay] = field(default_factory=list)

    @property
    def p90_over_target(self) -> bool:
        return self.wait_p90 is not None and self.wait_p90 > self.target


def slo_share(day: QueueWaitDay) -> Decimal | None:
    """The share of the day's admitted jobs that started within the target, in percent."""
    if not day.admitted:
        return None
    return (Decimal(day.within_target) * 100 / day.admitted).quantize(Decimal("0.1"))


def queue_waits(*, since: date) -> list[QueueWaits]:
    stats = {s.queue_id: s for s in QueueStats.objects.all()}
    days: dict[int, list[QueueWaitDay]] = defaultdict(list)
    for day in QueueWaitDay.objects.filter(day__gte=since).order_by("day"):
        days[day.queue_id].append(day)
    result = []
    for queue in Queue.objects.active():
        st = stats.get(queue.pk)
        result.append(
            QueueWaits(
                queue=queue.name,
                target=queue.expected_wait_target,
                wait_p50=st.wait_p50 if st else None,
                wait_p90=st.wait_p90 if st else None,
                pending=st.pending if st else 0,
                days=days[queue.pk],
            )
        )
    return result


# --- Teams: usage against quota, fair share --------------------------------------------------


@dataclass(frozen=True)
class TeamClassUse:
    team: str
    gpu_class: str
    held: Decimal  # every job of the team on the class, reservations' included
    on_quota: Decimal  # what of it its quota carries (nominal and borrowed; the quota grid's)
    nominal: Decimal
    borrowing_limit: Decimal
    weight: Decimal | None

    @property
    def normalized(self) -> Decimal | None:
        """GPU-equivalents held × the class's weight on the rate card in force."""
        return None if self.weight is None else (self.held * self.weight).quantize(HOURS_PLACES)

    @property
    def borrowed(self) -> Decimal:
        """What the team holds on its quota beyond its nominal share. Jobs on its reservations
        (or on one that ended while they ran) are not borrowed."""
        return max(self.on_quota - self.nominal, Decimal(0))

    @property
    def reserved(self) -> Decimal:
        """What the team holds on reservations."""
        return max(self.held - self.on_quota, Decimal(0))


@dataclass(frozen=True)
class Standing:
    team: str
    weight: Decimal
    recent_usage: Decimal
    rank: int

    @property
    def per_weight(self) -> Decimal:
        """What fair share orders by: decayed normalized GPU-hours over weight (lower first)."""
        return (self.recent_usage / self.weight).quantize(HOURS_PLACES)


def team_usage(*, now: datetime) -> tuple[list[TeamClassUse], list[Standing]]:
    """Per team and class, GPU-equivalents held now (as the last reconcile saw them) against
    quota; and the teams in fair-share order."""
    card = RateCard.objects.in_force(now)
    weights: dict[str, Decimal] = (
        {w.gpu_class.name: w.weight for w in card.weights.select_related("gpu_class")}
        if card
        else {}
    )
    quotas = {
        (q.team.name, q.gpu_class.name): q
        for q in Quota.objects.select_related("team", "gpu_class")
    }
    stats = {s.team_id: s for s in TeamStats.objects.all()}
    class_names = dict(GpuClass.objects.values_list("pk", "name"))
    on_quota = {
        (team_id, class_names[class_id]): gpu_amount(amount)
        for (team_id, class_id), amount in quota_use().items()
    }
    uses: list[TeamClassUse] = []
    standings: list[tuple[Decimal, str, Decimal, Decimal]] = []
    for team in Team.objects.active():
        st = stats.get(team.pk)
        held = {k: Decimal(v) for k, v in (st.held if st else {}).items()}
        classes = sorted(set(held) | {c for t, c in quotas if t == team.name})
        for gpu_class in classes:
            quota = quotas.get((team.name, gpu_class))
            uses.append(
                TeamClassUse(
                    team=team.name,
                    gpu_class=gpu_class,
                    held=held.get(gpu_class, Decimal(0)),
                    on_quota=on_quota.get((team.pk, gpu_class), Decimal(0)),
                    nominal=quota.nominal if quota else Decimal(0),
                    borrowing_limit=quota.borrowing_limit if quota else Decimal(0),
                    weight=weights.get(gpu_class),
                )
            )
        recent = st.recent_usage if st else Decimal(0)
        standings.append(
            (recent / team.fair_share_weight, team.name, team.fair_share_weight, recent)
        )
    standings.sort()
    return uses, [
        Standing(team=name, weight=weight, recent_usage=recent, rank=index + 1)
        for index, (_, name, weight, recent) in enumerate(standings)
    ]


def usage_half_life() -> timedelta | None:
    settings_row = FairShareSettings.objects.filter(pk=1).first()
    return settings_row.usage_half_life if settings_row else None


# --- Nodes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRow:
    node: Node
    free: Decimal

    @property
    def state(self) -> str:
        if not self.node.healthy:
            return "unhealthy"
        return self.node.maintenance or "in service"


NODES_PER_PAGE = 50


def node_table(*, page: str | None) -> tuple[list[NodeRow], Page[Node]]:
    """One page of GPU nodes, those that need attention first (unhealthy, then in maintenance,
    then by name): class, GPUs in use (the last reconcile's), free (in-service capacity not
    held by the portal's jobs nor by pods the portal did not create), health, maintenance. A
    page number that is not one shows the first or last page."""
    nodes = (
        Node.objects.filter(gpu_class__isnull=False)
        .select_related("gpu_class")
        .only(
            "name",
            "gpu_count",
            "mig_layout",
            "healthy",
            "health_reason",
            "maintenance",
            "maintenance_reason",
            "maintenance_until",
            "gpus_used_outside",
            "gpus_in_use",
            "gpu_class__name",
            "gpu_class__mig_profiles",
        )
        .order_by("healthy", Case(When(maintenance="", then=Value(1)), default=Value(0)), "name")
    )
    shown = Paginator(nodes, NODES_PER_PAGE).get_page(page)
    rows = []
    for node in shown:
        assert node.gpu_class is not None
        capacity = node.gpu_class.node_capacity(node.gpu_count, node.mig_layout)
        in_service = node.healthy and not node.maintenance
        free = (
            max(
                Decimal(capacity.numerator) / Decimal(capacity.denominator)
                - node.gpus_used_outside
                - node.gpus_in_use,
                Decimal(0),
            ).quantize(Decimal("0.001"))
            if in_service
            else Decimal("0.000")
        )
        rows.append(NodeRow(node, free))
    return rows, shown


def node_states() -> dict[str, int]:
    """How many GPU nodes are in service, in maintenance, unhealthy."""
    counts = {"in_service": 0, "maintenance": 0, "unhealthy": 0}
    for healthy, maintenance in Node.objects.filter(gpu_class__isnull=False).values_list(
        "healthy", "maintenance"
    ):
        counts["unhealthy" if not healthy else "maintenance" if maintenance else "in_service"] += 1
    return counts


# --- The reconcile and the counters ----------------------------------------------------------


def cluster_status() -> ClusterStatus | None:
    return ClusterStatus.objects.filter(pk=1).first()


def counters() -> dict[str, dict[str, float]]:
    """Every stored counter: name → label → value."""
    result: dict[str, dict[str, float]] = defaultdict(dict)
    for name, label, value in MetricCounter.objects.values_list("name", "label", "value"):
        result[name][label] = value
    return dict(result)


# --- /metrics: gauges from the database at scrape time ---------------------------------------


def pending_by_queue_reason() -> QuerySet[Any]:
    """Pending jobs now by queue and binding reason (their stored first reason)."""
    return (
        Job.objects.filter(state=JobState.PENDING)
        .annotate(code=KT("pending_reasons__0__code"))
        .values("queue__name", "code")
        .annotate(n=Count("id"))
        .order_by()
    )


def running_by_class_team() -> QuerySet[Any]:
    """Running jobs and their devices by GPU class and team."""
    return (
        Job.objects.filter(state=JobState.RUNNING, gpu_class__isnull=False)
        .values("gpu_class__name", "team__name")
        .annotate(jobs=Count("id"), devices=Sum(F("pods") * F("gpus_per_pod")))
        .order_by()
    )
