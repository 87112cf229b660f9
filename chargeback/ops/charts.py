"""Plotly figures of /ops/, each drawn from the same selector result as the table beside it
(nothing is recomputed here). A figure is the dict plotly.js takes (``{"data": [...],
"layout": {...}}``, the schema of plotly's figure reference), handed to the template as is:
building and validating a dozen ``plotly.graph_objects`` figures of a thousand points each, and
deep-copying them to serialize, took half the page's time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from chargeback.charts import LAYOUT
from chargeback.ops.selectors import (
    STATE_LABELS,
    STATES,
    CapacityPeriod,
    FragmentationPoint,
    QueueWaits,
    TeamClassUse,
    slo_share,
)
from chargeback.selectors import Waste
from queues.jobs.duty import DutySum
from queues.models import CapacitySample

SLOT_SHOWN = "8"  # the gang shape the fragmentation charts follow


Figure = dict[str, Any]


def _figure(title: str, **layout: object) -> Figure:
    # The title hangs from the top of the chart, so a title wrapped on a phone grows down into
    # the top margin (charts.js widens it) instead of over the plot.
    title_layout = {"text": title, "yref": "container", "y": 0.98, "yanchor": "top"}
    # Axis labels take the room they need (a class under a day, a two-line time) instead of
    # being cut off at the chart's bottom edge.
    xaxis = {"automargin": True, **dict(layout.pop("xaxis", {}))}  # type: ignore[call-overload]
    # The legend sits at the chart's bottom edge (not at a fraction of the plot's height,
    # where it covered a two-level axis) and the plot makes room for it.
    legend = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"}
    return {
        "data": [],
        "layout": {
            **LAYOUT,
            "height": 360,
            "margin": {**LAYOUT["margin"], "r": 24},  # type: ignore[dict-item]
            "title": title_layout,
            "xaxis": xaxis,
            "legend": legend,
            **layout,
        },
    }


# Time axes say minutes or days, never a sub-second tick ("08:09:55.6375") when a series has
# a single point and plotly zooms in on it.
HOURLY_AXIS = {"type": "date", "tickformat": "%H:%M<br>%b %d", "nticks": 6, "tickangle": 0}


def _hourly_axis(hours: Sequence[datetime]) -> dict[str, Any]:
    """The hourly time axis; a single hour is shown with the hour on each side, so that plotly
    does not zoom into seconds and label every tick with the same minute."""
    distinct = sorted(set(hours))
    if len(distinct) != 1:
        return HOURLY_AXIS
    hour = timedelta(hours=1)
    return {**HOURLY_AXIS, "range": [_stamp(distinct[0] - hour), _stamp(distinct[0] + hour)]}


DAILY_AXIS = {"type": "category", "categoryorder": "category ascending", "nticks": 7}


def _bar(figure: Figure, **trace: object) -> None:
    figure["data"].append({"type": "bar", **trace})


def _scatter(figure: Figure, **trace: object) -> None:
    figure["data"].append({"type": "scatter", **trace})


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M")


def capacity_now(samples: Sequence[CapacitySample]) -> Figure:
    figure = _figure("Capacity now (GPU-equivalents)", barmode="stack")
    classes = [s.gpu_class.name for s in samples]
    for state in STATES:
        _bar(
            figure,
            name=STATE_LABELS[state],
            x=classes,
            y=[float(getattr(s, state)) for s in samples],
        )
    return figure


def capacity_over_time(periods: Sequence[CapacityPeriod]) -> Figure:
    """GPU-hours by state, per class and day (a two-level axis: class, then day)."""
    figure = _figure("Capacity by day (GPU-hours)", barmode="stack")
    x = [[p.gpu_class for p in periods], [f"{p.start:%m-%d}" for p in periods]]
    for state in STATES:
        _bar(figure, name=STATE_LABELS[state], x=x, y=[float(p.hours[state]) for p in periods])
    return figure


def allocation(periods: Sequence[CapacityPeriod], *, title: str, hourly: bool) -> Figure:
    figure = _figure(
        title,
        yaxis={"title": "% of allocatable", "range": [0, 100]},
        xaxis=_hourly_axis([p.start for p in periods]) if hourly else DAILY_AXIS,
    )
    for gpu_class in sorted({p.gpu_class for p in periods}):
        mine = [p for p in periods if p.gpu_class == gpu_class]
        _scatter(
            figure,
            name=gpu_class,
            mode="lines+markers",
            x=[_stamp(p.start) if hourly else f"{p.start:%Y-%m-%d}" for p in mine],
            y=[None if p.allocation is None else float(p.allocation) for p in mine],
        )
    return figure


def waits(rows: Sequence[QueueWaits]) -> Figure:
    figure = _figure("Waits against target (minutes)", barmode="group")
    queues = [r.queue for r in rows]

    def minutes(values: Sequence[object]) -> list[float | None]:
        return [None if v is None else v.total_seconds() / 60 for v in values]  # type: ignore[attr-defined]

    _bar(figure, name="p50", x=queues, y=minutes([r.wait_p50 for r in rows]))
    _bar(figure, name="p90", x=queues, y=minutes([r.wait_p90 for r in rows]))
    # A wide dark bar across each queue's slot: visible over the p50 and p90 bars.
    _scatter(
        figure,
        name="target",
        x=queues,
        y=minutes([r.target for r in rows]),
        mode="markers",
        marker={"symbol": "line-ew", "size": 36, "line": {"width": 3, "color": "#b42318"}},
    )
    return figure


def slo(rows: Sequence[QueueWaits]) -> Figure:
    figure = _figure(
        "Started within target (% per day)", yaxis={"range": [0, 100]}, xaxis=DAILY_AXIS
    )
    for row in rows:
        _scatter(
            figure,
            name=row.queue,
            mode="lines+markers",
            x=[f"{d.day:%Y-%m-%d}" for d in row.days],
            y=[None if (s := slo_share(d)) is None else float(s) for d in row.days],
        )
    return figure


def pending_now(rows: Sequence[tuple[str, str, int]]) -> Figure:
    figure = _figure("Pending now by binding reason", barmode="stack")
    codes = sorted({code for _, code, _ in rows})
    for queue in sorted({q for q, _, _ in rows}):
        _bar(
            figure,
            name=queue,
            x=codes,
            y=[sum(n for q, c, n in rows if q == queue and c == code) for code in codes],
        )
    return figure


def pending_over_time(series: dict[str, list[tuple[datetime, Decimal]]]) -> Figure:
    figure = _figure(
        "Pending by reason, hourly average",
        xaxis=_hourly_axis([at for points in series.values() for at, _ in points]),
    )
    for code, points in sorted(series.items()):
        _scatter(
            figure,
            name=code,
            mode="lines+markers",  # one hour recorded is a point, not an invisible line
            x=[_stamp(at) for at, _ in points],
            y=[float(v) for _, v in points],
        )
    return figure


def fragmentation_now(samples: Sequence[CapacitySample]) -> Figure:
    figure = _figure("Free GPUs and 8-GPU slots now", barmode="group")
    classes = [s.gpu_class.name for s in samples]
    _bar(figure, name="free GPU-equivalents", x=classes, y=[float(s.unheld) for s in samples])
    _bar(
        figure,
        name="GPUs in 8-GPU slots",
        x=classes,
        y=[8 * int(s.slots.get(SLOT_SHOWN, 0)) for s in samples],
    )
    return figure


def fragmentation_over_time(points: Sequence[FragmentationPoint]) -> Figure:
    figure = _figure("Free GPUs vs 8-GPU slots, hourly", xaxis=_hourly_axis([p.at for p in points]))
    for gpu_class in sorted({p.gpu_class for p in points}):
        mine = [p for p in points if p.gpu_class == gpu_class]
        x = [_stamp(p.at) for p in mine]
        _scatter(
            figure,
            name=f"{gpu_class} free",
            mode="lines+markers",
            x=x,
            y=[float(p.free) for p in mine],
        )
        _scatter(
            figure,
            name=f"{gpu_class} in 8-GPU slots",
            mode="lines+markers",
            line={"dash": "dot"},
            x=x,
            y=[8 * p.slots.get(SLOT_SHOWN, 0) for p in mine],
        )
    return figure


def waste(rows: Sequence[Waste]) -> Figure:
    figure = _figure("Waste (GPU-hours)", barmode="stack")
    teams = [w.team for w in rows]
    _bar(
        figure,
        name="preemption since checkpoint",
        x=teams,
        y=[float(w.preempted_gpu_hours) for w in rows],
    )
    _bar(
        figure,
        name="drains since checkpoint",
        x=teams,
        y=[float(w.drained_gpu_hours) for w in rows],
    )
    _bar(figure, name="failed jobs", x=teams, y=[float(w.failed_gpu_hours) for w in rows])
    return figure


def team_usage(rows: Sequence[TeamClassUse]) -> Figure:
    figure = _figure("Held now vs quota (GPU-eq)", barmode="group")
    x = [[r.team for r in rows], [r.gpu_class for r in rows]]
    _bar(figure, name="held", x=x, y=[float(r.held) for r in rows])
    _bar(figure, name="nominal quota", x=x, y=[float(r.nominal) for r in rows])
    _bar(
        figure,
        name="nominal + borrowing limit",
        x=x,
        y=[float(r.nominal + r.borrowing_limit) for r in rows],
    )
    return figure


def duty(rows: Sequence[DutySum]) -> Figure:
    figure = _figure("Busy vs idle GPU-hours by team", barmode="stack")
    teams = [r.name for r in rows]
    _bar(figure, name="busy", x=teams, y=[float(r.busy_gpu_hours) for r in rows])
    _bar(figure, name="idle", x=teams, y=[float(r.idle_gpu_hours) for r in rows])
    _bar(
        figure, name="no utilization data", x=teams, y=[float(r.unmeasured_gpu_hours) for r in rows]
    )
    return figure
