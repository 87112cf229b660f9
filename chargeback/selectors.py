"""Reads of chargeback: who sees which teams, a period's statement (frozen or live), its
adjustments, and the numbers around it (waste, forecast, idle capacity, trend)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from chargeback.budgets import BudgetStatus, budget_statuses
from chargeback.capacity import CapacitySplit, capacity_split
from chargeback.forecast import Forecast, month_forecast
from chargeback.models import FrozenLine, Period, Reopening, month_end, month_start
from chargeback.statements import DEFAULT_GROUP_BY, Line, Totals, statement
from portal.formatting import format_datetime
from portal.roles import is_finance
from queues.cluster.prometheus import PrometheusUnavailable
from queues.jobs.duty import duty_lines
from queues.models import EventKind, Job, JobEvent, JobState, Team, UsageInterval
from queues.rates import MICROSECONDS_PER_HOUR, round_hours


def team_ids_visible_to(user: Any) -> list[int] | None:
    """The teams whose usage ``user`` may see: None means all (finance and admins); a member
    sees their teams'; anyone else none."""
    if is_finance(user):
        return None
    if not user.is_authenticated:
        return []
    return list(Team.objects.filter(members=user).values_list("pk", flat=True))


@dataclass(frozen=True)
class Adjustment:
    """A change to a closed period's statement since it was closed, as a line."""

    period_id: int
    month: date
    line: Line


def _key(line: Line) -> tuple[Any, ...]:
    return (*(line.key[g] for g in DEFAULT_GROUP_BY), line.currency)


def _frozen_line(row: FrozenLine) -> Line:
    return Line(
        key={
            "team": row.team.name,
            "cost_center": row.cost_center,
            "gpu_class": row.gpu_class.name,
            "sharing_mode": row.sharing_mode,
        },
        currency=row.currency,
        device_hours=row.device_hours,
        gpu_hours=row.gpu_hours,
        normalized_gpu_hours=row.normalized_gpu_hours,
        cost=row.cost,
        versions=tuple(row.versions),
        provisional=False,
    )


def _sub(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    if a is None and b is None:
        return None
    return (a or Decimal(0)) - (b or Decimal(0))


def pending_adjustments(
    *, before: date, now: datetime, team_ids: Iterable[int] | None = None
) -> list[Adjustment]:
    """What changed in each period closed before ``before`` since it was closed (its live
    statement minus its frozen lines and the adjustments already recorded for it), line by line;
    only ``team_ids``' lines when given."""
    teams = None if team_ids is None else list(team_ids)
    adjustments = []
    for period in Period.objects.filter(month__lt=before).order_by("month"):
        live = {
            _key(line): line
            for line in statement(start=period.start, end=period.end, now=now, team_ids=teams).lines
        }
        recorded: dict[tuple[Any, ...], list[Line]] = {}
        rows = FrozenLine.objects.filter(
            adjustment_for__isnull=True, period=period
        ) | FrozenLine.objects.filter(adjustment_for=period)
        if teams is not None:
            rows = rows.filter(team_id__in=teams)
        for row in rows.select_related("team", "gpu_class"):
            line = _frozen_line(row)
            recorded.setdefault(_key(line), []).append(line)
        for key in sorted(set(live) | set(recorded), key=lambda k: tuple(map(str, k))):
            now_line = live.get(key)
            before_lines = recorded.get(key, [])
            diff = Line(
                key=(now_line or before_lines[0]).key,
                currency=key[-1],
                device_hours=(now_line.device_hours if now_line else Decimal("0.000"))
                - sum((b.device_hours for b in before_lines), Decimal(0)),
                gpu_hours=(now_line.gpu_hours if now_line else Decimal("0.000"))
                - sum((b.gpu_hours for b in before_lines), Decimal(0)),
                normalized_gpu_hours=_sub(
                    now_line.normalized_gpu_hours if now_line else None,
                    _sum_or_none(b.normalized_gpu_hours for b in before_lines),
                ),
                cost=_sub(
                    now_line.cost if now_line else None,
                    _sum_or_none(b.cost for b in before_lines),
                ),
                versions=now_line.versions if now_line else (),
                provisional=False,
            )
            if diff.device_hours or diff.gpu_hours or diff.normalized_gpu_hours or diff.cost:
                adjustments.append(Adjustment(period.pk, period.month, diff))
    return adjustments


def _sum_or_none(values: Iterable[Decimal | None]) -> Decimal | None:
    present = [v for v in values if v is not None]
    return sum(present, Decimal(0)) if present else None


@dataclass
class PeriodReport:
    """A month as the chargeback page, its CSV and the API show it, as of ``as_of``: the instant
    its numbers are computed at (usage held after it does not count), or its close for a closed
    month's frozen statement."""

    month: date
    start: datetime
    end: datetime
    now: datetime
    period: Period | None  # None while open (or computed as of an instant before its close)
    lines: list[Line]
    adjustments: list[Adjustment]
    as_of: datetime
    totals: Totals = field(init=False)
    adjustment_totals: Totals = field(init=False)

    def __post_init__(self) -> None:
        self.totals = Totals.of(self.lines)
        self.adjustment_totals = Totals.of(a.line for a in self.adjustments)

    @property
    def closed(self) -> bool:
        return self.period is not None

    @property
    def open(self) -> bool:
        """Under way at its as-of instant (begun, not ended, not closed): the forecast looks
        ahead from there."""
        return self.period is None and self.start <= self.as_of < self.end


class AsOfRefused(ValueError):
    """An ``as_of`` a statement cannot be computed at, with the reason in words."""


def default_as_of(month: date, *, now: datetime) -> datetime:
    """A month's statement is as of now while it is open, as of its close once closed."""
    period = Period.objects.filter(month=month).first()
    return period.closed_at if period is not None else now


def period_report(
    *,
    month: date,
    now: datetime,
    team_ids: list[int] | None,
    as_of: datetime | None = None,
) -> PeriodReport:
    """The month's statement as of ``as_of`` (default: now while open, its close once closed).
    A closed month gives its frozen lines and adjustments when asked as of its close or later;
    as of an earlier instant (or while open) it is computed, counting usage up to ``as_of``
    only (and the adjustments the next close would record, if this is the first open month).
    Raises ``AsOfRefused`` for an instant in the future."""
    start, end = month_start(month), month_end(month)
    if as_of is not None and as_of > now:
        raise AsOfRefused(f"{format_datetime(as_of)} is in the future")
    period = Period.objects.filter(month=month).first()
    if period is not None and (as_of is None or as_of >= period.closed_at):
        rows = FrozenLine.objects.filter(period=period).select_related(
            "team", "gpu_class", "adjustment_for"
        )
        if team_ids is not None:
            rows = rows.filter(team_id__in=team_ids)
        lines = [_frozen_line(r) for r in rows if r.adjustment_for is None]
        lines.sort(key=_key_text)
        adjustments = [
            Adjustment(r.adjustment_for.pk, r.adjustment_for.month, _frozen_line(r))
            for r in rows
            if r.adjustment_for is not None
        ]
        return PeriodReport(month, start, end, now, period, lines, adjustments, period.closed_at)
    at = now if as_of is None else as_of
    lines = statement(start=start, end=end, now=at, team_ids=team_ids).lines
    latest = Period.objects.filter(closed_at__lte=at).order_by("-month").first()
    first_open = period is None and (latest is None or month_end(latest.month).date() == month)
    adjustments = pending_adjustments(before=month, now=at, team_ids=team_ids) if first_open else []
    return PeriodReport(month, start, end, now, None, lines, adjustments, at)


def _key_text(line: Line) -> tuple[str, ...]:
    return tuple(str(v) for v in _key(line))


# --- Around the bill: waste, forecast, trend ------------------------------------------------


WASTE_GROUPS = ("team", "queue", "gpu_class")


@dataclass(frozen=True)
class Waste:
    """GPU-hours lost in a period, for one team (and queue and GPU class, when grouped so):

    - ``preempted_gpu_hours``: jobs preempted by admission — from the job's last checkpoint
      before the preemption (or its pods' start, if it reported none since) until its pods let
      go of the GPUs, stopping grace included;
    - ``drained_gpu_hours``: the same for jobs stopped because their node was drained;
    - ``failed_gpu_hours``: everything jobs that failed held;
    - ``idle_gpu_hours``: allocated but idle, from the GPU duty cycle (None: not measured —
      no Prometheus, or no utilization series for these pods).

    A preemption's loss belongs to the period it happened in. Each line is rounded once; a
    team's sum is the sum of its rounded lines."""

    team: str
    preempted_gpu_hours: Decimal
    failed_gpu_hours: Decimal
    drained_gpu_hours: Decimal = Decimal("0.000")
    idle_gpu_hours: Decimal | None = None
    queue: str = ""
    gpu_class: str = ""

    @property
    def lost_gpu_hours(self) -> Decimal:
        """Preemption, drains and failures (idle apart: the GPUs were held for the job)."""
        return self.preempted_gpu_hours + self.drained_gpu_hours + self.failed_gpu_hours


WasteKey = tuple[str, str, str]  # team, queue, GPU class


def _stop_losses(
    *, start: datetime, until: datetime, as_of: datetime, team_ids: list[int] | None
) -> tuple[dict[WasteKey, Fraction], dict[WasteKey, Fraction]]:
    """Exact GPU-hours lost to the preemptions and drains in [``start``, ``until``), by key: for
    each pod holding GPUs when its job was told to stop, from the later of its start and the
    job's last checkpoint before the stop, to when the pod let go (at most ``as_of``) — also
    past ``until``: the loss belongs to the period of the stop."""
    events = JobEvent.objects.filter(kind=EventKind.PREEMPTED, at__gte=start, at__lt=until)
    if team_ids is not None:
        events = events.filter(job__team_id__in=team_ids)
    stops = list(events.values_list("job_id", "at", "details"))
    preempted: dict[WasteKey, Fraction] = {}
    drained: dict[WasteKey, Fraction] = {}
    if not stops:
        return preempted, drained
    job_ids = {job_id for job_id, _, _ in stops}
    checkpoints: dict[int, list[datetime]] = {}
    for job_id, at in (
        JobEvent.objects.filter(job_id__in=job_ids, kind=EventKind.CHECKPOINT)
        .order_by("at")
        .values_list("job_id", "at")
    ):
        checkpoints.setdefault(job_id, []).append(at)
    intervals: dict[int, list[tuple[Any, ...]]] = {}
    for row in UsageInterval.objects.filter(job_id__in=job_ids).values_list(
        "job_id",
        "team__name",
        "job__queue__name",
        "gpu_class__name",
        "started_at",
        "ended_at",
        "devices",
        "share_numerator",
        "share_denominator",
    ):
        intervals.setdefault(row[0], []).append(row[1:])
    for job_id, at, details in stops:
        into = drained if (details or {}).get("maintenance_nodes") else preempted
        for (
            team,
            queue,
            gpu_class,
            started,
            ended,
            devices,
            numerator,
            denominator,
        ) in intervals.get(job_id, []):
            if started > at or (ended is not None and ended < at):
                continue  # not holding GPUs when told to stop
            saved = max([started, *(c for c in checkpoints.get(job_id, []) if c <= at)])
            held = min(ended or as_of, as_of) - saved
            if held <= timedelta(0):
                continue
            key = (team, queue, gpu_class)
            into[key] = into.get(key, Fraction(0)) + Fraction(
                held // timedelta(microseconds=1) * devices * numerator,
                MICROSECONDS_PER_HOUR * denominator,
            )
    return preempted, drained


def waste_lines(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    team_ids: list[int] | None,
    prometheus: Any | None = None,
) -> list[Waste]:
    """Waste in [``start``, ``end``) as of ``now``, per team, queue and GPU class (see
    ``Waste``). With ``prometheus`` (``queues.cluster.prometheus.Prometheus``) the idle hours
    come from the duty cycle; without it, or when it cannot be read, they are None."""
    until = min(end, now)
    preempted, drained = _stop_losses(start=start, until=until, as_of=now, team_ids=team_ids)
    failed = statement(
        start=start,
        end=end,
        now=now,
        group_by=("job", "gpu_class"),
        team_ids=team_ids,
        job_states=[JobState.FAILED],
    )
    names = {
        pk: (team, queue)
        for pk, team, queue in Job.objects.filter(
            pk__in={line.key["job"] for line in failed.lines}
        ).values_list("pk", "team__name", "queue__name")
    }
    failed_hours: dict[WasteKey, Decimal] = {}
    for line in failed.lines:
        team, queue = names[line.key["job"]]
        key = (team, queue, line.key["gpu_class"])
        failed_hours[key] = failed_hours.get(key, Decimal(0)) + line.gpu_hours
    idle: dict[WasteKey, Fraction | None] | None = None
    if prometheus is not None and start < until:
        idle = _idle_hours(prometheus, start=start, end=until, team_ids=team_ids)
    measured = {key for key, hours in (idle or {}).items() if hours is not None}
    keys = set(preempted) | set(drained) | set(failed_hours) | measured
    zero = Decimal("0.000")
    return [
        Waste(
            team=team,
            queue=queue,
            gpu_class=gpu_class,
            preempted_gpu_hours=round_hours(preempted.get(key, Fraction(0))),
            drained_gpu_hours=round_hours(drained.get(key, Fraction(0))),
            failed_gpu_hours=failed_hours.get(key, zero),
            idle_gpu_hours=_rounded_or_none((idle or {}).get(key)),
        )
        for key in sorted(keys)
        for team, queue, gpu_class in [key]
    ]


def _rounded_or_none(value: Fraction | None) -> Decimal | None:
    return None if value is None else round_hours(value)


def _idle_hours(
    prometheus: Any, *, start: datetime, end: datetime, team_ids: list[int] | None
) -> dict[WasteKey, Fraction | None] | None:
    """Allocated-but-idle GPU-hours by key from the duty cycle (``queues.jobs.duty``), of the
    pods Prometheus has utilization for; None for a key none of whose pods it has (not
    measured is never shown as not idle). None when Prometheus cannot be read."""
    try:
        lines = duty_lines(prometheus, start=start, end=end)
    except PrometheusUnavailable:
        return None
    classes = dict(
        Job.objects.filter(pk__in={line.job_id for line in lines}).values_list(
            "pk", "gpu_class__name"
        )
    )
    allowed = (
        None
        if team_ids is None
        else set(Team.objects.filter(pk__in=team_ids).values_list("name", flat=True))
    )
    idle: dict[WasteKey, Fraction | None] = {}
    for line in lines:
        if allowed is not None and line.team not in allowed:
            continue
        key = (line.team, line.queue, classes.get(line.job_id) or "")
        measured = line.busy_gpu_hours + line.idle_gpu_hours
        before = idle.get(key)
        if measured:
            idle[key] = (before or Fraction(0)) + Fraction(line.idle_gpu_hours)
        else:
            idle.setdefault(key, None)
    return idle


def waste_by_team(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    team_ids: list[int] | None,
    prometheus: Any | None = None,
    by_class: bool = False,
) -> list[Waste]:
    """``waste_lines`` summed per team (see ``waste_team_sums``), or per team and GPU class with
    ``by_class`` (the /ops/ headline's per-class figures)."""
    return waste_team_sums(
        waste_lines(start=start, end=end, now=now, team_ids=team_ids, prometheus=prometheus),
        by_class=by_class,
    )


def measured_idle(rows: Iterable[Waste]) -> Decimal | None:
    """The sum of the lines' idle hours that were measured; None when none was."""
    measured = [w.idle_gpu_hours for w in rows if w.idle_gpu_hours is not None]
    return sum(measured, Decimal("0.000")) if measured else None


def waste_team_sums(lines: Iterable[Waste], *, by_class: bool = False) -> list[Waste]:
    """Waste lines summed per team (queue and class empty), or per team and class with
    ``by_class``: sums of the rounded lines; idle the sum of the measured lines' (None when none
    is measured)."""
    groups: dict[tuple[str, str], list[Waste]] = {}
    for line in lines:
        groups.setdefault((line.team, line.gpu_class if by_class else ""), []).append(line)
    zero = Decimal("0.000")
    return [
        Waste(
            team=team,
            gpu_class=gpu_class,
            preempted_gpu_hours=sum((w.preempted_gpu_hours for w in rows), zero),
            drained_gpu_hours=sum((w.drained_gpu_hours for w in rows), zero),
            failed_gpu_hours=sum((w.failed_gpu_hours for w in rows), zero),
            idle_gpu_hours=measured_idle(rows),
        )
        for (team, gpu_class), rows in sorted(groups.items())
    ]


def forecast_by_team(*, report: PeriodReport, team_ids: list[int] | None) -> list[Forecast]:
    """The month-end forecast per team of ``report`` while it is open at its as-of instant
    (``chargeback.forecast``); none for a closed month."""
    if not report.open:
        return []
    so_far: dict[str, Decimal] = {}
    currency = ""
    for line in report.lines:
        if line.cost is not None:
            so_far[line.key["team"]] = so_far.get(line.key["team"], Decimal(0)) + line.cost
            currency = currency or line.currency
    return month_forecast(
        end=report.end, as_of=report.as_of, so_far=so_far, currency=currency, team_ids=team_ids
    )


def months_before(month: date, count: int) -> list[date]:
    """``count`` months ending with ``month``, oldest first."""
    months = [month]
    for _ in range(count - 1):
        previous = months[0]
        months.insert(
            0,
            date(previous.year - 1, 12, 1)
            if previous.month == 1
            else date(previous.year, previous.month - 1, 1),
        )
    return months


def monthly_trend(
    *, month: date, now: datetime, team_ids: list[int] | None, months: int = 6
) -> list[tuple[date, Totals]]:
    """The totals of the ``months`` months up to ``month``, each as its report shows it."""
    return [
        (m, period_report(month=m, now=now, team_ids=team_ids).totals)
        for m in months_before(month, months)
    ]


@dataclass(frozen=True)
class DailyUse:
    """A member's own GPU-hours (devices × share × hours, open intervals until now) on one
    UTC day."""

    day: date
    gpu_hours: Decimal


OWN_USAGE_DAYS = 30


def own_usage_by_day(user: Any, *, now: datetime, days: int = OWN_USAGE_DAYS) -> list[DailyUse]:
    """GPU-hours of the jobs ``user`` submitted, per UTC day for the last ``days`` days (today
    included, so far), oldest first; each usage interval split at midnight. One query."""
    first = (now - timedelta(days=days - 1)).date()
    start = datetime.combine(first, time(0), tzinfo=UTC)
    totals: dict[date, Fraction] = {first + timedelta(days=i): Fraction(0) for i in range(days)}
    for started, ended, devices, numerator, denominator in (
        UsageInterval.objects.filter(job__owner=user, started_at__lt=now)
        .exclude(ended_at__lte=start)
        .values_list("started_at", "ended_at", "devices", "share_numerator", "share_denominator")
    ):
        held = devices * Fraction(numerator, denominator)
        at, end = max(started, start), min(ended or now, now)
        while at < end:
            midnight = datetime.combine(at.date() + timedelta(days=1), time(0), tzinfo=UTC)
            part = min(end, midnight) - at
            totals[at.astimezone(UTC).date()] += held * Fraction(int(part.total_seconds()), 3600)
            at = min(end, midnight)
    return [DailyUse(day, round_hours(hours)) for day, hours in sorted(totals.items())]


@dataclass
class StatementView:
    """Everything the chargeback page shows for a month as of an instant — the statement,
    adjustments, waste, forecast, budgets and (finance) idle capacity: the page, its CSV and the
    API all render this one object, so they agree to the cent."""

    report: PeriodReport
    waste: list[Waste]
    forecast: list[Forecast]
    budgets: list[BudgetStatus]
    capacity: list[CapacitySplit] | None  # None: not the viewer's to see (finance only)


def statement_view(
    *,
    user: Any,
    month: date,
    now: datetime,
    as_of: datetime | None = None,
    prometheus: Any | None = None,
) -> StatementView:
    """The month as ``user`` may see it, as of ``as_of`` (see ``period_report``). Raises
    ``AsOfRefused`` for an instant the statement cannot be computed at."""
    team_ids = team_ids_visible_to(user)
    report = period_report(month=month, now=now, team_ids=team_ids, as_of=as_of)
    forecast = forecast_by_team(report=report, team_ids=team_ids)
    return StatementView(
        report=report,
        waste=waste_lines(
            start=report.start,
            end=report.end,
            now=report.as_of,
            team_ids=team_ids,
            prometheus=prometheus,
        ),
        forecast=forecast,
        budgets=budget_statuses(
            month=month, lines=report.lines, forecasts=forecast, team_ids=team_ids
        ),
        capacity=capacity_split(start=report.start, end=report.end, now=report.as_of)
        if is_finance(user)
        else None,
    )


@dataclass(frozen=True)
class LineChange:
    """One statement line whose numbers differ from what had been frozen before a reopening."""

    team: str
    cost_center: str
    gpu_class: str
    sharing_mode: str
    currency: str
    gpu_hours_before: Decimal
    gpu_hours_after: Decimal
    cost_before: Decimal | None
    cost_after: Decimal | None

    @property
    def cost_change(self) -> Decimal | None:
        if self.cost_before is None and self.cost_after is None:
            return None
        return (self.cost_after or Decimal(0)) - (self.cost_before or Decimal(0))


@dataclass(frozen=True)
class ReopenedMonth:
    """A reopening of a month and what the month's statement (as shown now: computed while open,
    frozen again once closed) changes against what had been frozen before it."""

    reopening: Reopening
    changes: list[LineChange]
    cost_before: dict[str, Decimal]
    cost_after: dict[str, Decimal]


def month_reopenings(report: PeriodReport) -> list[ReopenedMonth]:
    """Each reopening of ``report``'s month, latest first, with the statement lines that differ
    from what had been frozen (the month's own lines; adjustments of earlier months are
    recorded again when it closes again)."""
    result = []
    for reopening in Reopening.objects.filter(month=report.month).select_related(
        "reopened_by", "closed_by"
    ):
        before = {_line_key(row): row for row in reopening.frozen if row["adjustment_for"] is None}
        after = {_line_key(line.key): line for line in report.lines}
        changes = []
        for key in sorted(before.keys() | after.keys()):
            old, new = before.get(key), after.get(key)
            change = LineChange(
                *key,
                currency=new.currency if new is not None else (old or {}).get("currency", ""),
                gpu_hours_before=Decimal(old["gpu_hours"]) if old else Decimal(0),
                gpu_hours_after=new.gpu_hours if new else Decimal(0),
                cost_before=Decimal(old["cost"]) if old and old["cost"] is not None else None,
                cost_after=new.cost if new else None,
            )
            if (change.gpu_hours_before, change.cost_before) != (
                change.gpu_hours_after,
                change.cost_after,
            ):
                changes.append(change)
        cost_before: dict[str, Decimal] = {}
        for row in before.values():
            if row["cost"] is not None:
                currency = row["currency"]
                cost_before[currency] = cost_before.get(currency, Decimal(0)) + Decimal(row["cost"])
        result.append(ReopenedMonth(reopening, changes, cost_before, dict(report.totals.cost)))
    return result


def _line_key(key: dict[str, Any]) -> tuple[str, str, str, str]:
    return (key["team"], key["cost_center"], key["gpu_class"], key["sharing_mode"])


def latest_closed_month() -> date | None:
    """The month a reopening may undo (periods close, and reopen, in order)."""
    return Period.objects.order_by("-month").values_list("month", flat=True).first()
