"""One shape for what the chargeback page, its CSV and the API show: ``report_data`` builds it,
``report_csv`` writes it. Totals are sums of the rounded lines, so every form agrees to the cent."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from chargeback.budgets import BudgetStatus
from chargeback.capacity import PARTS, CapacitySplit
from chargeback.forecast import Forecast
from chargeback.selectors import Adjustment, StatementView, Waste, measured_idle
from chargeback.statements import DEFAULT_GROUP_BY, Line, Totals
from portal.formatting import format_datetime


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def line_data(line: Line, group_by: Sequence[str]) -> dict[str, Any]:
    return {
        **{g: line.key[g] for g in group_by},
        "currency": line.currency,
        "device_hours": str(line.device_hours),
        "gpu_hours": str(line.gpu_hours),
        "normalized_gpu_hours": _text(line.normalized_gpu_hours),
        "cost": _text(line.cost),
        "rate_card_versions": list(line.versions),
        "provisional": line.provisional,
        "note": line.note,
    }


def totals_data(totals: Totals) -> dict[str, Any]:
    return {
        "device_hours": str(totals.device_hours),
        "gpu_hours": str(totals.gpu_hours),
        "normalized_gpu_hours": str(totals.normalized_gpu_hours),
        "cost": {currency: str(amount) for currency, amount in sorted(totals.cost.items())},
    }


def report_data(
    *,
    start: Any,
    end: Any,
    as_of: datetime,
    group_by: Sequence[str],
    lines: Sequence[Line],
    totals: Totals,
    adjustments: Sequence[Adjustment] = (),
    adjustment_totals: Totals | None = None,
    period: date | None = None,
    closed: bool = False,
    waste: Sequence[Waste] = (),
    forecast: Sequence[Forecast] = (),
    budgets: Sequence[BudgetStatus] = (),
    capacity: Sequence[CapacitySplit] | None = None,
) -> dict[str, Any]:
    return {
        "start": format_datetime(start),
        "end": format_datetime(end),
        "as_of": format_datetime(as_of),
        "period": f"{period:%Y-%m}" if period else None,
        "closed": closed,
        "group_by": list(group_by),
        "lines": [line_data(line, group_by) for line in lines],
        "totals": totals_data(totals),
        "adjustments": [
            {"for_period": f"{a.month:%Y-%m}", **line_data(a.line, group_by)} for a in adjustments
        ],
        "adjustment_totals": totals_data(adjustment_totals or Totals.of([])),
        "forecast": [forecast_data(f) for f in forecast],
        "waste": [waste_data(w) for w in waste],
        "waste_totals": waste_data(waste_total(waste)),
        "budgets": [budget_data(b) for b in budgets],
        "idle_capacity": None if capacity is None else [capacity_data(c) for c in capacity],
    }


def view_data(view: StatementView) -> dict[str, Any]:
    """A month's ``StatementView`` in the one shape the API, the CSV and the page's tests read."""
    report = view.report
    return report_data(
        start=report.start,
        end=report.end,
        as_of=report.as_of,
        group_by=DEFAULT_GROUP_BY,
        lines=report.lines,
        totals=report.totals,
        adjustments=report.adjustments,
        adjustment_totals=report.adjustment_totals,
        period=report.month,
        closed=report.closed,
        waste=view.waste,
        forecast=view.forecast,
        budgets=view.budgets,
        capacity=view.capacity,
    )


def forecast_data(f: Forecast) -> dict[str, Any]:
    return {
        "team": f.team,
        "currency": f.currency,
        "billed_so_far": str(f.so_far),
        "running_jobs_to_likely_end": str(f.running),
        "new_work_at_run_rate": str(f.new_work),
        "total": str(f.total),
        "low": str(f.low),
        "high": str(f.high),
        "run_rate_per_day": str(f.run_rate_per_day),
        "running_jobs": f.running_jobs,
        "days_left": str(f.days_left),
    }


def waste_total(rows: Sequence[Waste]) -> Waste:
    """The sum of the rounded waste lines (idle: of the measured lines; None when none is)."""
    zero = Decimal("0.000")
    return Waste(
        team="",
        preempted_gpu_hours=sum((w.preempted_gpu_hours for w in rows), zero),
        drained_gpu_hours=sum((w.drained_gpu_hours for w in rows), zero),
        failed_gpu_hours=sum((w.failed_gpu_hours for w in rows), zero),
        idle_gpu_hours=measured_idle(rows),
    )


def waste_data(w: Waste) -> dict[str, Any]:
    return {
        "team": w.team,
        "queue": w.queue,
        "gpu_class": w.gpu_class,
        "preempted_gpu_hours": str(w.preempted_gpu_hours),
        "drained_gpu_hours": str(w.drained_gpu_hours),
        "failed_gpu_hours": str(w.failed_gpu_hours),
        "idle_gpu_hours": _text(w.idle_gpu_hours),
    }


def budget_data(b: BudgetStatus) -> dict[str, Any]:
    return {
        "scope": b.scope,
        "name": b.name,
        "teams": list(b.teams),
        "currency": b.currency,
        "amount": str(b.amount),
        "spent": str(b.spent),
        "spent_percent": str(b.spent_percent),
        "forecast": _text(b.forecast),
        "forecast_percent": _text(b.forecast_percent),
        "level": b.level,
    }


def capacity_data(c: CapacitySplit) -> dict[str, Any]:
    return {
        "gpu_class": c.gpu_class,
        "pool": c.pool,
        **{name: str(getattr(c, name)) for name in (*PARTS, "allocatable")},
        "used_without_node_history": str(c.used_without_node_history),
    }


WASTE_VALUES = [
    "preempted_gpu_hours",
    "drained_gpu_hours",
    "failed_gpu_hours",
    "idle_gpu_hours",
]
# Idle capacity rows (finance only) fill these last columns; ``capacity_idle`` is the idle not
# kept warm by a floor, ``capacity_warm_idle`` the idle on nodes a warm floor held.
CAPACITY_VALUES = [f"capacity_{name}" for name in ("gpu_class", "pool", *PARTS, "allocatable")]
CSV_VALUES = [
    "currency",
    "device_hours",
    "gpu_hours",
    "normalized_gpu_hours",
    "cost",
    "rate_card_versions",
    "provisional",
    "note",
]


def report_csv(data: dict[str, Any]) -> str:
    """The report as CSV: one row per line, then a total row per currency, then the adjustments
    (each naming its period) and their totals, then the waste by team, queue and class and its
    total, then (finance only) the idle capacity per GPU class and pool. Every row starts with
    the period (``YYYY-MM``, or ``start/end`` for a range) and the as-of instant, so the CSVs of
    several months stack into one sheet."""
    group_by = data["group_by"]
    period = data["period"] or f"{data['start']}/{data['end']}"
    lead = [period, data["as_of"]]
    width = len(group_by) + len(CSV_VALUES)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "period",
            "as_of",
            "kind",
            "for_period",
            *group_by,
            *CSV_VALUES,
            "queue",
            *WASTE_VALUES,
            *CAPACITY_VALUES,
        ]
    )
    blank_waste = ["" for _ in range(1 + len(WASTE_VALUES) + len(CAPACITY_VALUES))]

    def rows(kind: str, lines: list[dict[str, Any]], totals: dict[str, Any]) -> None:
        for line in lines:
            writer.writerow(
                [
                    *lead,
                    kind,
                    line.get("for_period", ""),
                    *(line[g] for g in group_by),
                    *(
                        " ".join(line[c])
                        if c == "rate_card_versions"
                        else ("yes" if line[c] else "")
                        if c == "provisional"
                        else ("" if line[c] is None else line[c])
                        for c in CSV_VALUES
                    ),
                    *blank_waste,
                ]
            )
        for currency, cost in totals["cost"].items() or [("", "")]:
            writer.writerow(
                [
                    *lead,
                    f"{kind} total",
                    "",
                    *("" for _ in group_by),
                    currency,
                    totals["device_hours"],
                    totals["gpu_hours"],
                    totals["normalized_gpu_hours"],
                    cost,
                    "",
                    "",
                    "",
                    *blank_waste,
                ]
            )

    rows("line", data["lines"], data["totals"])
    if data["adjustments"]:
        rows("adjustment", data["adjustments"], data["adjustment_totals"])
    waste = data.get("waste") or []
    for w in [*waste, *([data["waste_totals"]] if waste else [])]:
        cells = {g: w.get(g, "") for g in group_by}
        writer.writerow(
            [
                *lead,
                "waste" if w["team"] else "waste total",
                "",
                *(cells[g] for g in group_by),
                *("" for _ in range(width - len(group_by))),
                w["queue"],
                *("" if w[c] is None else w[c] for c in WASTE_VALUES),
                *("" for _ in CAPACITY_VALUES),
            ]
        )
    for c in data.get("idle_capacity") or []:
        writer.writerow(
            [
                *lead,
                "idle capacity",
                "",
                *("" for _ in range(width + 1 + len(WASTE_VALUES))),
                *(c[name.removeprefix("capacity_")] for name in CAPACITY_VALUES),
            ]
        )
    return out.getvalue()
