"""Reads of chargeback: who sees which teams, a period's statement (frozen or live), its
adjustments, and the numbers around it (waste, forecast, idle capacity, trend)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from chargeback.models import FrozenLine, Period, month_end, month_start
from chargeback.statements import DEFAULT_GROUP_BY, Line, Totals, statement
from portal.roles import is_finance
from queues.models import Job, JobEvent, JobState, RateCard, Team, UsageInterval
from queues.rates import rate_interval, round_hours, round_money


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
    """A month as the chargeback page, its CSV and the API show it."""

    month: date
    start: datetime
    end: datetime
    now: datetime
    period: Period | None  # None while open
    lines: list[Line]
    adjustments: list[Adjustment]
    totals: Totals = field(init=False)
    adjustment_totals: Totals = field(init=False)

    def __post_init__(self) -> None:
        self.totals = Totals.of(self.lines)
        self.adjustment_totals = Totals.of(a.line for a in self.adjustments)

    @property
    def closed(self) -> bool:
        return self.period is not None


def period_report(*, month: date, now: datetime, team_ids: list[int] | None) -> PeriodReport:
    """The month's statement: its frozen lines and adjustments once closed, else computed now
    (and the adjustments the next close would record, if this is the first open month)."""
    start, end = month_start(month), month_end(month)
    period = Period.objects.filter(month=month).first()
    if period is not None:
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
        return PeriodReport(month, start, end, now, period, lines, adjustments)
    lines = statement(start=start, end=end, now=now, team_ids=team_ids).lines
    latest = Period.objects.order_by("-month").first()
    first_open = latest is None or month_end(latest.month).date() == month
    adjustments = (
        pending_adjustments(before=month, now=now, team_ids=team_ids) if first_open else []
    )
    return PeriodReport(month, start, end, now, None, lines, adjustments)


def _key_text(line: Line) -> tuple[str, ...]:
    return tuple(str(v) for v in _key(line))


# --- Around the bill: waste, forecast, trend ------------------------------------------------


@dataclass(frozen=True)
class Waste:
    """GPU-hours a team lost in a period: work since the last checkpoint of its preempted jobs,
    and everything its failed jobs held."""

    team: str
    preempted_gpu_hours: Decimal
    failed_gpu_hours: Decimal
    gpu_class: str = ""  # with ``by_class`` only


def waste_by_team(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    team_ids: list[int] | None,
    by_class: bool = False,
) -> list[Waste]:
    """Per team (and GPU class, with ``by_class``: the /ops/ headline's per-class figures; a
    preempted job's class is the one its usage intervals held)."""
    preempted: dict[tuple[str, str], Fraction] = {}
    events = JobEvent.objects.filter(kind="preempted", at__gte=start, at__lt=min(end, now))
    if team_ids is not None:
        events = events.filter(job__team_id__in=team_ids)
    events_list = list(events.select_related("job__team"))
    # A job's GPU-equivalents: its pods' devices × share, from its usage intervals.
    shares: dict[int, Fraction] = {}
    classes: dict[int, str] = {}
    for job_id, devices, numerator, denominator, class_name in UsageInterval.objects.filter(
        job_id__in={e.job_id for e in events_list}
    ).values_list("job_id", "devices", "share_numerator", "share_denominator", "gpu_class__name"):
        shares.setdefault(job_id, Fraction(devices * numerator, denominator))
        classes.setdefault(job_id, class_name)
    for event in events_list:
        lost = Fraction(int(event.details.get("lost_work_seconds", 0) or 0), 3600)
        job: Job = event.job
        gpu_eq = shares.get(job.pk, Fraction(0)) * job.pods
        key = (job.team.name, classes.get(job.pk, "") if by_class else "")
        preempted[key] = preempted.get(key, Fraction(0)) + lost * gpu_eq
    failed = statement(
        start=start,
        end=end,
        now=now,
        group_by=("team", "gpu_class") if by_class else ("team",),
        team_ids=team_ids,
        job_states=[JobState.FAILED],
    )
    failed_by_key = {
        (line.key["team"], line.key["gpu_class"] if by_class else ""): line.gpu_hours
        for line in failed.lines
    }
    keys = sorted(set(preempted) | set(failed_by_key))
    return [
        Waste(
            team=team,
            preempted_gpu_hours=round_hours(preempted.get((team, gpu_class), Fraction(0))),
            failed_gpu_hours=failed_by_key.get((team, gpu_class), Decimal("0.000")),
            gpu_class=gpu_class,
        )
        for team, gpu_class in keys
    ]


@dataclass(frozen=True)
class Forecast:
    """A team's cost to the end of the period if its running jobs ran to their runtime limits
    and nothing else started: a forecast, not a charge."""

    team: str
    so_far: Decimal
    running_until_limits: Decimal
    currency: str

    @property
    def total(self) -> Decimal:
        return self.so_far + self.running_until_limits


def forecast_by_team(*, report: PeriodReport, team_ids: list[int] | None) -> list[Forecast]:
    """Per team of ``report`` (an open period): its cost so far plus its open usage intervals
    carried on from now to the earlier of their job's runtime limit and the period's end."""
    if report.closed or report.now >= report.end:
        return []
    so_far: dict[str, Decimal] = {}
    currency = ""
    for line in report.lines:
        if line.cost is not None:
            so_far[line.key["team"]] = so_far.get(line.key["team"], Decimal(0)) + line.cost
            currency = line.currency
    cards = RateCard.objects.all().terms()
    ahead: dict[str, Fraction] = {}
    running = UsageInterval.objects.filter(ended_at__isnull=True).select_related(
        "job", "team", "gpu_class"
    )
    if team_ids is not None:
        running = running.filter(team_id__in=team_ids)
    for interval in running:
        job = interval.job
        limit = (job.started_at or interval.started_at) + job.runtime_limit
        for part in rate_interval(
            start=report.now,
            end=min(limit, report.end),
            devices=interval.devices,
            share=interval.share,
            gpu_class=interval.gpu_class.name,
            cards=cards,
        ):
            if part.cost is not None:
                currency = currency or part.currency
                ahead[interval.team.name] = ahead.get(interval.team.name, Fraction(0)) + part.cost
    return [
        Forecast(
            team=team,
            so_far=so_far.get(team, Decimal("0.00")),
            running_until_limits=round_money(ahead.get(team, Fraction(0))),
            currency=currency,
        )
        for team in sorted(set(so_far) | set(ahead))
    ]


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
