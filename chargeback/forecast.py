"""A month-end forecast per team, in three parts that say what they are:

- **billed so far**: the statement's lines as of the forecast's instant;
- **running jobs**: each usage interval still open then, carried on to its job's *likely* end —
  the runtime prediction the start estimates use (``queues.reconcile.snapshot``'s runtime
  history, ``queues.admission.forecast.predicted_end``), or its runtime limit without history —
  and never past the month's end. A job told to stop by then (preempted, drained, cancelled,
  failed, succeeded) adds nothing more;
- **new work**: the team's run rate (its mean daily cost over the ``RUN_RATE_DAYS`` days before
  the instant) over the days left, less what its running jobs already fill of them (never
  below zero: running work is not counted twice).

The range: the running jobs at their 10th and 90th percentile runtimes, and the run rate moved
by ``Z90`` standard deviations of the daily cost × √(days left) — about a 90 % range if days vary
as the recent ones did. A forecast, never a charge."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.contrib.auth import get_user_model
from django.db.models import Min, Q

from chargeback.statements import statement
from queues.admission.forecast import predicted_end
from queues.models import EventKind, Job, JobEvent, RateCard, UsageInterval
from queues.rates import rate_interval, round_money
from queues.reconcile.snapshot import forecast_for, runtime_forecasts, runtime_history

RUN_RATE_DAYS = 21
Z90 = 1.645
DAY = timedelta(days=1)
# What tells a job to stop: after it, its held GPUs are let go, not worked on.
STOPS = (
    EventKind.PREEMPTED,
    EventKind.CANCELLED,
    EventKind.FAILED,
    EventKind.SUCCEEDED,
)


@dataclass(frozen=True)
class Forecast:
    """A team's month-end cost forecast as of an instant (money rounded to the cent, each part
    once; the total is the sum of the parts)."""

    team: str
    currency: str
    so_far: Decimal
    running: Decimal
    new_work: Decimal
    run_rate_per_day: Decimal
    low: Decimal
    high: Decimal
    running_jobs: int
    days_left: Decimal

    @property
    def total(self) -> Decimal:
        return self.so_far + self.running + self.new_work


def month_forecast(
    *,
    end: datetime,
    as_of: datetime,
    so_far: dict[str, Decimal],
    currency: str,
    team_ids: list[int] | None,
) -> list[Forecast]:
    """Per team, the forecast to ``end`` (the month's end) as of ``as_of`` from ``so_far`` (its
    cost billed up to ``as_of``, by team name). Empty once ``as_of`` reached ``end``."""
    if as_of >= end:
        return []
    running, running_low, running_high, counts, running_currency = _running(
        end=end, as_of=as_of, team_ids=team_ids
    )
    currency = currency or running_currency
    days = _daily_costs(as_of=as_of, team_ids=team_ids)
    left = Fraction((end - as_of) // timedelta(microseconds=1), DAY // timedelta(microseconds=1))
    teams = sorted(set(so_far) | set(running) | {t for t, d in days.items() if any(d)})
    result = []
    for team in teams:
        daily = days.get(team, [])
        mean = Fraction(sum(daily, Fraction(0)), len(daily)) if daily else Fraction(0)
        spread = Fraction(0)
        if len(daily) > 1:
            variance = sum(((d - mean) ** 2 for d in daily), Fraction(0)) / (len(daily) - 1)
            spread = Fraction(Z90 * math.sqrt(float(variance) * float(left))).limit_denominator(
                10**6
            )
        expected = mean * left
        ahead = running.get(team, Fraction(0))
        low_ahead = running_low.get(team, Fraction(0))
        high_ahead = running_high.get(team, Fraction(0))
        base = so_far.get(team, Decimal("0.00"))
        result.append(
            Forecast(
                team=team,
                currency=currency,
                so_far=base,
                running=round_money(ahead),
                new_work=round_money(max(expected - ahead, Fraction(0))),
                run_rate_per_day=round_money(mean),
                low=base + round_money(max(low_ahead, expected - spread, Fraction(0))),
                high=base + round_money(max(high_ahead, expected + spread)),
                running_jobs=counts.get(team, 0),
                days_left=Decimal(float(left)).quantize(Decimal("0.1")),
            )
        )
    return result


def _running(
    *, end: datetime, as_of: datetime, team_ids: list[int] | None
) -> tuple[dict[str, Fraction], dict[str, Fraction], dict[str, Fraction], dict[str, int], str]:
    """The cost ahead of the intervals open at ``as_of`` (likely, low, high), the count of
    their jobs, by team name; and the currency."""
    intervals = (
        UsageInterval.objects.filter(started_at__lt=as_of)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=as_of))
        .select_related("team", "gpu_class", "job__queue", "job__owner")
    )
    if team_ids is not None:
        intervals = intervals.filter(team_id__in=team_ids)
    rows = list(intervals)
    stopped = {
        (job_id, at)
        for job_id, at in JobEvent.objects.filter(
            job_id__in={i.job_id for i in rows}, kind__in=STOPS, at__lte=as_of
        ).values_list("job_id", "at")
    }
    table = runtime_forecasts(runtime_history(as_of)) if rows else {}
    cards = RateCard.objects.all().terms()
    username = get_user_model().USERNAME_FIELD
    likely: dict[str, Fraction] = {}
    low: dict[str, Fraction] = {}
    high: dict[str, Fraction] = {}
    jobs: dict[str, set[int]] = {}
    currency = ""
    for interval in rows:
        if any(job_id == interval.job_id and at >= interval.started_at for job_id, at in stopped):
            continue  # told to stop: its GPUs are being let go, no more work
        job: Job = interval.job
        team = interval.team.name
        jobs.setdefault(team, set()).add(job.pk)
        prediction = forecast_for(table, (job.queue.name, getattr(job.owner, username), job.image))
        start, limit = interval.started_at, job.runtime_limit
        ratios = (
            (1.0, 1.0, 1.0)
            if prediction is None
            else (
                prediction.likely,
                prediction.low,
                prediction.high,
            )
        )
        for into, ratio in zip((likely, low, high), ratios, strict=True):
            until = min(
                predicted_end(
                    started=(start, limit), ratio=ratio, now=as_of, limit_end=start + limit
                ),
                end,
            )
            for part in rate_interval(
                start=as_of,
                end=max(until, as_of),
                devices=interval.devices,
                share=interval.share,
                gpu_class=interval.gpu_class.name,
                cards=cards,
            ):
                if part.cost is not None:
                    currency = currency or part.currency
                    into[team] = into.get(team, Fraction(0)) + part.cost
    return likely, low, high, {t: len(j) for t, j in jobs.items()}, currency


def _daily_costs(*, as_of: datetime, team_ids: list[int] | None) -> dict[str, list[Fraction]]:
    """Per team, its cost on each of the ``RUN_RATE_DAYS`` days (24-hour spans) before
    ``as_of``, oldest first — fewer days when the portal's usage began later (at least one)."""
    first = UsageInterval.objects.aggregate(first=Min("started_at"))["first"]
    if first is None or first >= as_of:
        return {}
    span = (as_of - first) // DAY
    count = max(1, min(RUN_RATE_DAYS, span))
    days: dict[str, list[Fraction]] = {}
    for n in range(count, 0, -1):
        lo = as_of - n * DAY
        day = statement(start=lo, end=lo + DAY, now=as_of, group_by=("team",), team_ids=team_ids)
        seen = set()
        for line in day.lines:
            if line.cost is not None:
                team = line.key["team"]
                days.setdefault(team, [Fraction(0)] * (count - n))
                if team in seen:
                    days[team][-1] += Fraction(line.cost)
                else:
                    days[team].append(Fraction(line.cost))
                    seen.add(team)
        for team, values in days.items():
            if team not in seen:
                values.append(Fraction(0))
    return days
