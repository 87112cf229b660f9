"""Plotly figures drawn from the numbers the tables show (nothing is recomputed here)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import plotly.graph_objects as go

from chargeback.capacity import CapacitySplit
from chargeback.selectors import DailyUse
from chargeback.statements import Line, Totals

LAYOUT = {
    "margin": {"l": 48, "r": 8, "t": 36, "b": 40},
    "height": 320,
    "legend": {"orientation": "h", "y": -0.2},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "paper_bgcolor": "#fff",
    "plot_bgcolor": "#fff",
}


def normalized_by_team(lines: Sequence[Line]) -> str:
    """Normalized GPU-hours per team, stacked by GPU class (the rated lines, summed)."""
    classes = sorted({line.key["gpu_class"] for line in lines if line.normalized_gpu_hours})
    teams = sorted({line.key["team"] for line in lines})
    figure = go.Figure(layout={**LAYOUT, "barmode": "stack", "title": "Normalized GPU-hours"})
    for gpu_class in classes:
        figure.add_bar(
            name=gpu_class,
            x=teams,
            y=[
                float(
                    sum(
                        line.normalized_gpu_hours or 0
                        for line in lines
                        if line.key["team"] == team and line.key["gpu_class"] == gpu_class
                    )
                )
                for team in teams
            ],
        )
    return figure.to_json()


def monthly_trend(trend: Sequence[tuple[date, Totals]]) -> str:
    figure = go.Figure(layout={**LAYOUT, "title": "Normalized GPU-hours by month"})
    figure.add_scatter(
        x=[f"{month:%Y-%m}" for month, _ in trend],
        y=[float(totals.normalized_gpu_hours) for _, totals in trend],
        mode="lines+markers",
        name="normalized GPU-hours",
    )
    return figure.to_json()


def capacity(splits: Sequence[CapacitySplit]) -> str:
    """Used vs idle, kept warm, reserved-idle, unhealthy, maintenance and outside GPU-hours per
    class."""
    figure = go.Figure(layout={**LAYOUT, "barmode": "stack", "title": "Capacity (GPU-hours)"})
    classes = [s.gpu_class for s in splits]
    for part, label in (
        ("used", "used"),
        ("idle", "idle"),
        ("warm_idle", "idle, kept warm by a floor"),
        ("reserved_idle", "reserved, idle"),
        ("unhealthy", "unhealthy"),
        ("maintenance", "maintenance"),
        ("outside", "used outside the portal"),
    ):
        figure.add_bar(name=label, x=classes, y=[float(getattr(s, part)) for s in splits])
    return figure.to_json()


def own_usage(days: Sequence[DailyUse]) -> str:
    """A member's own GPU-hours per day."""
    figure = go.Figure(layout={**LAYOUT, "title": "My GPU-hours per day (UTC), last 30 days"})
    figure.add_bar(
        name="GPU-hours",
        x=[d.day.isoformat() for d in days],
        y=[float(d.gpu_hours) for d in days],
        marker_color="#2456c7",
    )
    return figure.to_json()
