"""Plotly figures for the catalog and queue pages, drawn from the selectors the tables beside
them read (nothing is recomputed here)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import plotly.graph_objects as go

from queues.catalog.selectors import ClassAvailability, PastWait

LAYOUT = {
    "margin": {"l": 48, "r": 8, "t": 36, "b": 40},
    "height": 300,
    "legend": {"orientation": "h", "y": -0.25},
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "paper_bgcolor": "#fff",
    "plot_bgcolor": "#fff",
}


def free_vs_total(availability: Sequence[ClassAvailability]) -> str:
    """Per GPU class: GPUs in service, and how much of them is free now."""
    classes = [a.gpu_class for a in availability]
    figure = go.Figure(
        layout={**LAYOUT, "barmode": "overlay", "title": "Free GPUs now, of those in service"}
    )
    figure.add_bar(
        name="in service", x=classes, y=[a.in_service for a in availability], marker_color="#cbd5e1"
    )
    figure.add_bar(
        name="free", x=classes, y=[float(a.free) for a in availability], marker_color="#227a43"
    )
    return figure.to_json()


def wait_history(waits: Sequence[PastWait], target: timedelta) -> str:
    """Each admitted job's wait (minutes) against the queue's expected wait target."""
    figure = go.Figure(
        layout={
            **LAYOUT,
            "title": "Waits of jobs admitted in the last 14 days (minutes)",
            "yaxis": {"rangemode": "tozero"},
        }
    )
    figure.add_scatter(
        name="wait",
        x=[w.admitted_at.isoformat() for w in waits],
        y=[round(w.wait.total_seconds() / 60, 1) for w in waits],
        mode="markers",
        marker={"color": "#2456c7"},
    )
    if waits:
        figure.add_scatter(
            name="target",
            x=[waits[0].admitted_at.isoformat(), waits[-1].admitted_at.isoformat()],
            y=[target.total_seconds() / 60] * 2,
            mode="lines",
            line={"color": "#a8581a", "dash": "dash"},
        )
    return figure.to_json()
