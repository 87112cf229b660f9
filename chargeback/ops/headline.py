"""The /ops/ headline and its recommendations: is the cluster used well, and is it getting better?

Per GPU class, this week (the last 7 days to now) against the week before:

    allocated %  = in-use GPU-hours / allocatable GPU-hours           (the capacity samples)
    busy %       = busy / (busy + idle) GPU-hours of the class's pods  (the duty cycle, DCGM)
    GPU-hours lost = preempted (work since the last checkpoint, chargeback's waste)
                   + failed (held by jobs that failed, chargeback's waste)
                   + idle allocations (allocated but idle, the duty cycle)
                   + reserved-but-idle (reserved GPUs no job used, the capacity samples)
                   + stranded by fragmentation (free GPUs in minutes when a job waited on
                     ``Fragmentation`` in a queue that allows the class)
    SLO compliance = jobs admitted onto the class whose wait met their queue's target / admitted
    jobs waiting = the average number of jobs waiting in queues that allow the class

and four kinds of recommendation, each with its numbers and the admin page that acts on it:
an idle reservation while jobs waited for its class; busy share low on big GPUs; free GPUs no
waiting shape can use (with the node whose drain makes room, ``queues.admission.drain``); queues
past their wait target.

The arithmetic (``ClassWeek``, ``headline_rows``, the ``*_recommendations``) is pure: plain
numbers in, rows and sentences out, so each is tested by hand. ``headline_read`` at the end
gathers the numbers from the database, chargeback and Prometheus.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from urllib.parse import urlencode

from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, Sum
from django.urls import reverse

from chargeback.ops.selectors import STATES, QueueWaits, capacity_over_time, queue_waits
from chargeback.selectors import Waste, waste_by_team
from portal.formatting import format_duration
from queues.admission.drain import DrainAdvice, drains_to_fit
from queues.admission.reasons import ReasonCode
from queues.cluster.prometheus import Prometheus, PrometheusUnavailable
from queues.jobs.duty import DutyLine, duty_lines
from queues.models import (
    CapacityHour,
    CapacitySample,
    GpuClass,
    Job,
    JobState,
    PendingSample,
    Queue,
    Reservation,
    UsageInterval,
)
from queues.rates import MICROSECONDS_PER_HOUR, round_hours
from queues.reconcile.snapshot import snapshot_build

WEEK = timedelta(days=7)
# A reservation idle at least this share of its time in the week, while jobs waited, is advice.
IDLE_RESERVATION_PERCENT = Decimal(50)
# ... over at least this long in force while the portal watched (a new portal has minutes).
MIN_RESERVATION_SPAN = timedelta(hours=1)
# Pods on big GPUs busy less than this share of what they held are advice, once they held at
# least LOW_DUTY_MIN_GPU_HOURS in the week (less is noise).
LOW_DUTY_PERCENT = Decimal(30)
LOW_DUTY_MIN_GPU_HOURS = Decimal(1)
# A job counts as having waited for a class when it waited at least this long (a cycle's
# seconds between submission and admission are not waiting).
WAITED_AT_LEAST = timedelta(minutes=1)
ZERO = Decimal("0.000")


def percent(part: Decimal, whole: Decimal) -> Decimal | None:
    """``part`` over ``whole`` in percent, to one decimal (half up); None when ``whole`` is 0."""
    if not whole:
        return None
    return (part * 100 / whole).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def whole_percent(part: Decimal, whole: Decimal) -> int:
    """The same in whole percent, as the recommendations say it."""
    return int((part * 100 / whole).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def amount_text(value: Decimal) -> str:
    """``Decimal('8.000')`` → ``8``, ``Decimal('7.430')`` → ``7.43``."""
    normalized = value.normalize()
    return (
        str(int(normalized)) if normalized == normalized.to_integral_value() else f"{normalized:f}"
    )


def jobs_text(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


# --- The headline ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassWeek:
    """One GPU class's numbers over one week (GPU-hours unless said). ``busy`` and ``idle`` are
    None when the duty cycle could not be measured (no Prometheus)."""

    gpu_class: str
    in_use: Decimal = ZERO
    allocatable: Decimal = ZERO
    reserved_idle: Decimal = ZERO
    stranded: Decimal = ZERO
    busy: Decimal | None = None
    idle: Decimal | None = None
    preempted: Decimal = ZERO
    failed: Decimal = ZERO
    admitted: int = 0
    within_target: int = 0
    # None when the reconcile recorded no minute of the week (the portal did not run then)
    waiting: Decimal | None = Decimal("0.0")

    @property
    def allocated_percent(self) -> Decimal | None:
        return percent(self.in_use, self.allocatable)

    @property
    def busy_percent(self) -> Decimal | None:
        if self.busy is None or self.idle is None:
            return None
        return percent(self.busy, self.busy + self.idle)

    @property
    def lost_parts(self) -> dict[str, Decimal]:
        """GPU-hours lost by kind (idle allocations only when measured)."""
        return {
            "preemption": self.preempted,
            "failures": self.failed,
            "idle allocations": self.idle if self.idle is not None else ZERO,
            "reserved, idle": self.reserved_idle,
            "stranded": self.stranded,
        }

    @property
    def lost(self) -> Decimal:
        return sum(self.lost_parts.values(), ZERO)

    @property
    def slo_percent(self) -> Decimal | None:
        return percent(Decimal(self.within_target), Decimal(self.admitted))


@dataclass(frozen=True)
class HeadlineRow:
    gpu_class: str
    this: ClassWeek
    last: ClassWeek

    @property
    def lost_change(self) -> Decimal:
        return self.this.lost - self.last.lost


def headline_rows(this: list[ClassWeek], last: list[ClassWeek]) -> list[HeadlineRow]:
    """Each class of either week, by name, this week beside the last (a class absent from a
    week shows zeros there)."""
    this_by = {w.gpu_class: w for w in this}
    last_by = {w.gpu_class: w for w in last}
    return [
        HeadlineRow(name, this_by.get(name, ClassWeek(name)), last_by.get(name, ClassWeek(name)))
        for name in sorted(set(this_by) | set(last_by))
    ]


# --- Recommendations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Recommendation:
    """What to do, with its numbers, and where to do it."""

    kind: str  # reservation-idle | low-duty | fragmentation | wait-target
    text: str
    action: str  # the link's words
    url_name: str
    url_args: tuple[str, ...] = ()
    query: dict[str, str] = field(default_factory=dict)

    @property
    def href(self) -> str:
        url = reverse(self.url_name, args=self.url_args)
        return f"{url}?{urlencode(self.query)}" if self.query else url


@dataclass(frozen=True)
class ReservationWeek:
    """A reservation over the week: GPU-hours it guaranteed (amount × hours in force) and its
    jobs used, and how many jobs waited for its class meanwhile."""

    name: str
    gpu_class: str
    amount: Decimal
    reserved_gpu_hours: Decimal
    used_gpu_hours: Decimal
    jobs_waited: int
    # how long of the week it was in force and watched (None: all of it)
    span: timedelta | None = None

    @property
    def idle_gpu_hours(self) -> Decimal:
        return max(self.reserved_gpu_hours - self.used_gpu_hours, ZERO)


def reservation_recommendations(weeks: list[ReservationWeek]) -> list[Recommendation]:
    """A reservation idle at least ``IDLE_RESERVATION_PERCENT`` of its week while jobs waited
    for its class."""
    found = []
    for r in sorted(weeks, key=lambda r: (-r.idle_gpu_hours, r.name)):
        if not r.reserved_gpu_hours or not r.jobs_waited:
            continue
        if r.span is not None and r.span < MIN_RESERVATION_SPAN:
            continue  # minutes of history say nothing about a reservation's week
        if r.idle_gpu_hours * 100 < IDLE_RESERVATION_PERCENT * r.reserved_gpu_hours:
            continue  # the threshold on the exact share, not the rounded one it prints
        share = whole_percent(r.idle_gpu_hours, r.reserved_gpu_hours)
        found.append(
            Recommendation(
                kind="reservation-idle",
                text=(
                    f"{r.name}: {amount_text(r.amount)} GPUs idle {share} % of "
                    + (
                        "the week"
                        if r.span is None
                        else f"the {format_duration(r.span)} it was in force this week"
                    )
                    + f" while {jobs_text(r.jobs_waited)} waited for {r.gpu_class} — lend it to "
                    "preemptible work or shrink it"
                ),
                action=f"Edit reservation {r.name}",
                url_name="operations:reservation-edit",
                url_args=(r.name,),
            )
        )
    return found


@dataclass(frozen=True)
class TeamClassDuty:
    """A team's pods on one GPU class over the week: busy and idle GPU-hours (measured),
    whether any was time-sliced, whether the class is a big one (it can be cut into MIG
    slices, so a smaller share would do)."""

    team: str
    gpu_class: str
    busy: Decimal
    idle: Decimal
    shared: bool
    big: bool


def low_duty_recommendations(duties: list[TeamClassDuty]) -> list[Recommendation]:
    """A team whose exclusive pods on a big GPU class were busy less than ``LOW_DUTY_PERCENT``
    of what they held (at least ``LOW_DUTY_MIN_GPU_HOURS`` measured)."""
    found = []
    for d in sorted(duties, key=lambda d: (-d.idle, d.team, d.gpu_class)):
        measured = d.busy + d.idle
        if not d.big or d.shared or measured < LOW_DUTY_MIN_GPU_HOURS:
            continue
        if d.busy * 100 >= LOW_DUTY_PERCENT * measured:
            continue
        share = whole_percent(d.busy, measured)
        found.append(
            Recommendation(
                kind="low-duty",
                text=(
                    f"team {d.team}: {d.gpu_class} jobs {share} % busy over "
                    f"{measured.quantize(ZERO)} GPU-hours this week — a MIG or time-sliced "
                    "class would serve them"
                ),
                action=f"Quota of {d.team} on {d.gpu_class}",
                url_name="operations:quota-edit",
                url_args=(d.team, d.gpu_class),
            )
        )
    return found


def fragmentation_recommendations(advice: list[DrainAdvice]) -> list[Recommendation]:
    """Free GPUs no waiting shape can use, with the node whose drain makes room soonest."""
    found = []
    for a in advice:
        shape = (
            f"no {a.devices}-GPU slot"
            if a.pods == 1
            else f"no room for {a.pods} pods of {a.devices} GPUs"
        )
        found.append(
            Recommendation(
                kind="fragmentation",
                text=(
                    f"{a.free} {a.gpu_class} GPUs free, {shape} ({jobs_text(a.jobs)} waiting) — "
                    f"drain {a.node} for {a.minutes} min to make one"
                ),
                action=f"Drain {a.node}",
                url_name="operations:maintenance",
                query={
                    "nodes": a.node,
                    "reason": f"make room for {a.pods} × {a.devices} GPUs (fragmentation)",
                },
            )
        )
    return found


def wait_target_recommendations(waits: list[QueueWaits]) -> list[Recommendation]:
    """Queues whose p90 wait is past their published target."""
    found = []
    for w in sorted(waits, key=lambda w: w.queue):
        if not w.p90_over_target or w.wait_p90 is None:
            continue
        found.append(
            Recommendation(
                kind="wait-target",
                text=(
                    f"queue {w.queue}: p90 wait {format_duration(w.wait_p90)} against a target "
                    f"of {format_duration(w.target)}, {jobs_text(w.pending)} waiting — add "
                    "capacity or quota for it, or publish a target it can keep"
                ),
                action=f"Edit queue {w.queue}",
                url_name="operations:policy-object",
                url_args=("queues", w.queue),
            )
        )
    return found


# --- Reading the numbers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Headline:
    start: datetime  # this week's
    end: datetime
    rows: list[HeadlineRow]
    recommendations: list[Recommendation]
    duty_error: str  # why busy % is missing: not configured, or Prometheus' error


def week_bounds(now: datetime) -> tuple[datetime, datetime, datetime]:
    """(last week's start, this week's start, now): this week starts on the hour, 7 days back."""
    this_start = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - WEEK
    return this_start - WEEK, this_start, now


def allowed_classes() -> dict[int, set[str]]:
    allowed: dict[int, set[str]] = defaultdict(set)
    for queue_id, name in Queue.allowed_gpu_classes.through.objects.values_list(
        "queue_id", "gpuclass__name"
    ):
        allowed[queue_id].add(name)
    return allowed


def _stranded(start: datetime, end: datetime) -> dict[str, Decimal]:
    """Free GPU-hours per class in the minutes when a job waited on ``Fragmentation`` in a
    queue that allows the class (summed by the database)."""
    blocked = PendingSample.objects.filter(
        at=OuterRef("at"),
        code=str(ReasonCode.FRAGMENTATION),
        jobs__gt=0,
        queue__allowed_gpu_classes=OuterRef("gpu_class"),
    )
    rows = (
        CapacitySample.objects.filter(at__gte=start, at__lt=end)
        .filter(Exists(blocked))
        .values("gpu_class__name")
        .annotate(free=Sum("free"))
        .order_by()
    )
    return {row["gpu_class__name"]: (row["free"] / 60).quantize(ZERO) for row in rows}


def _waiting(
    start: datetime, end: datetime, allowed: dict[int, set[str]]
) -> dict[str, Decimal] | None:
    """The average number of jobs waiting in queues that allow each class (a job in a queue of
    two classes counts for both): jobs summed over the minute samples / minutes sampled. None
    when no minute was sampled: unknown, not zero."""
    minutes = (
        CapacitySample.objects.filter(at__gte=start, at__lt=end).values("at").distinct().count()
    )
    if not minutes:
        return None
    sums: dict[str, int] = defaultdict(int)
    for row in (
        PendingSample.objects.filter(at__gte=start, at__lt=end)
        .values("queue_id")
        .annotate(jobs=Sum("jobs"))
        .order_by()
    ):
        for name in allowed.get(row["queue_id"], set()):
            sums[name] += row["jobs"]
    return {k: (Decimal(v) / minutes).quantize(Decimal("0.1")) for k, v in sums.items()}


def _slo(start: datetime, end: datetime) -> dict[str, tuple[int, int]]:
    """Per class, (jobs admitted onto it in the week, those whose wait met their queue's
    target), counted by the database."""
    rows = (
        Job.objects.filter(admitted_at__gte=start, admitted_at__lt=end, gpu_class__isnull=False)
        .values("gpu_class__name")
        .annotate(
            admitted=Count("id"),
            within=Count(
                "id",
                filter=Q(admitted_at__lte=F("submitted_at") + F("queue__expected_wait_target")),
            ),
        )
        .order_by()
    )
    return {row["gpu_class__name"]: (row["admitted"], row["within"]) for row in rows}


def _gpu_hours(
    started: datetime,
    ended: datetime | None,
    start: datetime,
    end: datetime,
    devices: int,
    numerator: int,
    denominator: int,
) -> Fraction:
    held = min(ended or end, end) - max(started, start)
    if held <= timedelta(0):
        return Fraction(0)
    return Fraction(
        held // timedelta(microseconds=1) * devices * numerator,
        MICROSECONDS_PER_HOUR * denominator,
    )


def _jobs_waited(gpu_class: str, lo: datetime, hi: datetime, queue_ids: set[int]) -> int:
    """Jobs that waited for ``gpu_class`` in [``lo``, ``hi``): admitted onto it there after
    waiting at least ``WAITED_AT_LEAST``, or still waiting in a queue that allows it (submitted
    at least that long before ``hi``). Counted by the database."""
    admitted = Job.objects.filter(
        gpu_class__name=gpu_class,
        admitted_at__gt=lo,
        admitted_at__lt=hi,
        admitted_at__gte=F("submitted_at") + WAITED_AT_LEAST,
    ).count()
    waiting = Job.objects.filter(
        state=JobState.PENDING,
        admitted_at__isnull=True,
        submitted_at__lt=hi - WAITED_AT_LEAST,
        queue_id__in=queue_ids,
    ).count()
    return admitted + waiting


def _reservation_weeks(
    start: datetime, end: datetime, allowed: dict[int, set[str]]
) -> list[ReservationWeek]:
    weeks = []
    reservations = list(Reservation.objects.active().select_related("gpu_class"))
    used: dict[int, Fraction] = defaultdict(Fraction)
    for rid, started, ended, devices, numerator, denominator in (
        UsageInterval.objects.filter(
            job__reservation_id__in=[r.pk for r in reservations], started_at__lt=end
        )
        .exclude(ended_at__lte=start)
        .values_list(
            "job__reservation_id",
            "started_at",
            "ended_at",
            "devices",
            "share_numerator",
            "share_denominator",
        )
    ):
        used[rid] += _gpu_hours(started, ended, start, end, devices, numerator, denominator)
    waited_counts: dict[tuple[str, datetime, datetime], int] = {}
    queues_of: dict[str, set[int]] = defaultdict(set)
    for queue_id, names in allowed.items():
        for name in names:
            queues_of[name].add(queue_id)
    # Before the first capacity sample the portal watched nothing: no reservation sat idle
    # then as far as it knows.
    firsts = [
        CapacitySample.objects.aggregate(at=Min("at"))["at"],
        CapacityHour.objects.aggregate(at=Min("hour"))["at"],
    ]
    watched = min((f for f in firsts if f is not None), default=end)
    for r in reservations:
        lo = max(r.starts_at or start, start, watched)
        hi = min(r.ends_at or end, end)
        if hi <= lo:
            continue
        hours = Fraction((hi - lo) // timedelta(microseconds=1), MICROSECONDS_PER_HOUR)
        name = r.gpu_class.name
        key = (name, lo, hi)
        if key not in waited_counts:
            waited_counts[key] = _jobs_waited(name, lo, hi, queues_of.get(name, set()))
        count = waited_counts[key]
        weeks.append(
            ReservationWeek(
                name=r.name,
                gpu_class=name,
                amount=r.amount,
                reserved_gpu_hours=round_hours(hours * Fraction(r.amount)),
                used_gpu_hours=round_hours(used[r.pk]),
                jobs_waited=count,
                span=None if hi - lo == end - start else _minutes(hi - lo),
            )
        )
    return weeks


def _minutes(span: timedelta) -> timedelta:
    return timedelta(minutes=span // timedelta(minutes=1))


def _class_week(
    name: str,
    capacity: dict[str, dict[str, Decimal]],
    stranded: dict[str, Decimal],
    duty: dict[str, tuple[Decimal, Decimal]] | None,
    waiting: dict[str, Decimal] | None,
    slo: dict[str, tuple[int, int]],
    wastes: list[Waste],
) -> ClassWeek:
    hours = capacity.get(name, dict.fromkeys(STATES, ZERO))
    waste = [w for w in wastes if w.gpu_class == name]
    admitted, within = slo.get(name, (0, 0))
    busy_idle = (duty or {}).get(name, (ZERO, ZERO)) if duty is not None else None
    return ClassWeek(
        gpu_class=name,
        in_use=hours["in_use"],
        allocatable=hours["in_use"] + hours["free"] + hours["reserved_idle"],
        reserved_idle=hours["reserved_idle"],
        stranded=stranded.get(name, ZERO),
        busy=busy_idle[0] if busy_idle is not None else None,
        idle=busy_idle[1] if busy_idle is not None else None,
        # stopped by preemption or by a drain: the work since the last checkpoint, and the grace
        preempted=sum((w.preempted_gpu_hours + w.drained_gpu_hours for w in waste), ZERO),
        failed=sum((w.failed_gpu_hours for w in waste), ZERO),
        admitted=admitted,
        within_target=within,
        waiting=None if waiting is None else waiting.get(name, Decimal("0.0")),
    )


def class_weeks(
    start: datetime,
    end: datetime,
    classes: list[str],
    allowed: dict[int, set[str]],
    lines: list[DutyLine] | None,
    *,
    waits: bool = True,
) -> list[ClassWeek]:
    """Each class's week; without ``waits`` the SLO and waiting figures stay zero (/metrics
    exports only the GPU-hours lost, and reads no job or pending sample for them)."""
    capacity: dict[str, dict[str, Decimal]] = defaultdict(lambda: dict.fromkeys(STATES, ZERO))
    for period in capacity_over_time(start=start, end=end, bucket="day"):
        for state in STATES:
            capacity[period.gpu_class][state] += period.hours[state]
    duty: dict[str, tuple[Decimal, Decimal]] | None = None
    if lines is not None:
        sums: dict[str, list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
        for line in lines:
            sums[line.gpu_class][0] += line.busy_gpu_hours
            sums[line.gpu_class][1] += line.idle_gpu_hours
        duty = {k: (v[0], v[1]) for k, v in sums.items()}
    stranded = _stranded(start, end)
    waiting = _waiting(start, end, allowed) if waits else {}
    slo = _slo(start, end) if waits else {}
    # chargeback's waste rule, once for the week, by team and class
    wastes = waste_by_team(start=start, end=end, now=end, team_ids=None, by_class=True)
    return [_class_week(name, capacity, stranded, duty, waiting, slo, wastes) for name in classes]


def _drains(now: datetime) -> list[DrainAdvice]:
    """The engine's drain advice, only when the reconcile's latest minute has jobs waiting on
    ``Fragmentation`` (otherwise there is none, and the page builds no snapshot)."""
    latest = PendingSample.objects.aggregate(at=Max("at"))["at"]
    if not PendingSample.objects.filter(
        at=latest, code=str(ReasonCode.FRAGMENTATION), jobs__gt=0
    ).exists():
        return []
    return drains_to_fit(snapshot_build(now=now, forecasts=False))


def headline_read(*, now: datetime, prometheus: Prometheus | None) -> Headline:
    """The headline and the recommendations as of ``now``."""
    last_start, this_start, end = week_bounds(now)
    classes = list(GpuClass.objects.active().order_by("name").values_list("name", flat=True))
    big = set(GpuClass.objects.exclude(mig_profiles={}).values_list("name", flat=True))
    allowed = allowed_classes()
    this_lines: list[DutyLine] | None = None
    last_lines: list[DutyLine] | None = None
    duty_error = "not configured: set PROMETHEUS_URL"
    if prometheus is not None:
        try:
            this_lines = duty_lines(prometheus, start=this_start, end=end)
            last_lines = duty_lines(prometheus, start=last_start, end=this_start)
            duty_error = ""
        except PrometheusUnavailable as exc:
            duty_error = f"Prometheus could not be read: {exc}"
            this_lines = last_lines = None
    rows = headline_rows(
        class_weeks(this_start, end, classes, allowed, this_lines),
        class_weeks(last_start, this_start, classes, allowed, last_lines),
    )
    duties: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    shared: dict[tuple[str, str], bool] = defaultdict(bool)
    for line in this_lines or []:
        key = (line.team, line.gpu_class)
        duties[key][0] += line.busy_gpu_hours
        duties[key][1] += line.idle_gpu_hours
        shared[key] |= line.shared
    recommendations = [
        *reservation_recommendations(_reservation_weeks(this_start, end, allowed)),
        *low_duty_recommendations(
            [
                TeamClassDuty(team, name, v[0], v[1], shared[(team, name)], name in big)
                for (team, name), v in sorted(duties.items())
            ]
        ),
        *fragmentation_recommendations(_drains(now)),
        *wait_target_recommendations(queue_waits(since=this_start.date())),
    ]
    return Headline(this_start, end, rows, recommendations, duty_error)
