"""Backtest of the month-end forecast (``chargeback.forecast``) on the demo's history.

    python bench/bench_forecast.py            # the demo's three closed months before today

Seeds the demo's history (``chargeback.demo.seed_history``: three closed months and this month
so far, through the reconcile's usage pass and the month close) into a fresh SQLite database,
then forecasts each closed month per team from its 10th and its 20th day (as of the end of that
day: only what was known then — usage held until that instant, jobs finished by then for the
runtime prediction, events up to then) and compares each forecast with what the month's close
billed the team. Prints a Markdown table: per day, the median and largest absolute error over
the team-months, the error of the cluster's total, and how many actuals fell in the forecast's
range.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAYS = (10, 20)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    os.environ.setdefault("DEBUG", "true")
    os.environ["PORTAL_VAR_DIR"] = str(tmp)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    sys.path.insert(0, str(ROOT))
    import logging

    import django

    django.setup()
    logging.disable(logging.INFO)
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from chargeback.demo import seed_history
    from chargeback.forecast import month_forecast
    from chargeback.models import Period, month_end, month_start
    from chargeback.selectors import period_report
    from chargeback.statements import statement
    from queues.policy.apply import policy_apply

    call_command("migrate", verbosity=0)
    policy_apply(text=(ROOT / "examples" / "policy.yaml").read_text())
    started = time.monotonic()
    now = timezone.now()
    history = seed_history(now=now, cluster_file=ROOT / "examples" / "cluster.yaml")
    seeded = time.monotonic() - started
    print(
        f"seeded {history.jobs} jobs, {history.pods} pods, closed "
        f"{', '.join(f'{m:%Y-%m}' for m in history.months)} in {seeded:.1f} s\n"
    )
    rows: dict[int, list[tuple[str, str, Decimal, Decimal, Decimal, Decimal]]] = {
        d: [] for d in DAYS
    }
    totals: dict[int, list[tuple[str, Decimal, Decimal]]] = {d: [] for d in DAYS}
    timing: list[float] = []
    for period in Period.objects.order_by("month"):
        actual: dict[str, Decimal] = {}
        for line in period_report(month=period.month, now=now, team_ids=None).lines:
            if line.cost is not None:
                actual[line.key["team"]] = actual.get(line.key["team"], Decimal(0)) + line.cost
        start, end = month_start(period.month), month_end(period.month)
        for day in DAYS:
            as_of = start + timedelta(days=day)
            clock = time.monotonic()
            so_far: dict[str, Decimal] = {}
            currency = ""
            for line in statement(start=start, end=end, now=as_of).lines:
                if line.cost is not None:
                    team = line.key["team"]
                    so_far[team] = so_far.get(team, Decimal(0)) + line.cost
                    currency = line.currency
            forecasts = month_forecast(
                end=end, as_of=as_of, so_far=so_far, currency=currency, team_ids=None
            )
            timing.append(time.monotonic() - clock)
            for f in forecasts:
                if f.team in actual:
                    rows[day].append(
                        (f"{period.month:%Y-%m}", f.team, f.total, f.low, f.high, actual[f.team])
                    )
            totals[day].append(
                (
                    f"{period.month:%Y-%m}",
                    sum((f.total for f in forecasts), Decimal(0)),
                    sum(actual.values(), Decimal(0)),
                )
            )

    def error(forecast: Decimal, actual: Decimal) -> float:
        return float(abs(forecast - actual) / actual * 100)

    print(
        "| forecast from | team-months | median abs. error | largest | "
        "cluster total: median abs. error | actual within the range |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for day in DAYS:
        errors = [error(f, a) for _, _, f, _, _, a in rows[day]]
        inside = sum(1 for _, _, _, lo, hi, a in rows[day] if lo <= a <= hi)
        cluster = [error(f, a) for _, f, a in totals[day]]
        print(
            f"| day {day} | {len(errors)} | {statistics.median(errors):.1f} % | "
            f"{max(errors):.1f} % | {statistics.median(cluster):.1f} % | "
            f"{inside} of {len(errors)} |"
        )
    print("\nPer team-month (forecast / actual, EUR):\n")
    print("| month | team | day 10 | day 20 | actual |")
    print("| --- | --- | ---: | ---: | ---: |")
    by_key = {(m, t): (f, a) for m, t, f, _, _, a in rows[DAYS[0]]}
    for month, team, forecast, _, _, actual in rows[DAYS[1]]:
        early = by_key.get((month, team), (Decimal(0), actual))[0]
        print(f"| {month} | {team} | {early} | {forecast} | {actual} |")
    print(
        f"\nOne month's forecast for all teams: {statistics.median(timing) * 1000:.0f} ms (median)"
    )


if __name__ == "__main__":
    main()
