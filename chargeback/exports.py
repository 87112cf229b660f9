"""One shape for what the chargeback page, its CSV and the API show: ``report_data`` builds it,
``report_csv`` writes it. Totals are sums of the rounded lines, so every form agrees to the cent."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from chargeback.selectors import Adjustment
from chargeback.statements import Line, Totals
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
    group_by: Sequence[str],
    lines: Sequence[Line],
    totals: Totals,
    adjustments: Sequence[Adjustment] = (),
    adjustment_totals: Totals | None = None,
    period: date | None = None,
    closed: bool = False,
) -> dict[str, Any]:
    return {
        "start": format_datetime(start),
        "end": format_datetime(end),
        "period": f"{period:%Y-%m}" if period else None,
        "closed": closed,
        "group_by": list(group_by),
        "lines": [line_data(line, group_by) for line in lines],
        "totals": totals_data(totals),
        "adjustments": [
            {"for_period": f"{a.month:%Y-%m}", **line_data(a.line, group_by)} for a in adjustments
        ],
        "adjustment_totals": totals_data(adjustment_totals or Totals.of([])),
    }


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
    (each naming its period) and their totals."""
    group_by = data["group_by"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["kind", "for_period", *group_by, *CSV_VALUES])

    def rows(kind: str, lines: list[dict[str, Any]], totals: dict[str, Any]) -> None:
        for line in lines:
            writer.writerow(
                [
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
                ]
            )
        for currency, cost in totals["cost"].items() or [("", "")]:
            writer.writerow(
                [
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
                ]
            )

    rows("line", data["lines"], data["totals"])
    if data["adjustments"]:
        rows("adjustment", data["adjustments"], data["adjustment_totals"])
    return out.getvalue()
