"""/ops/ charts' time axes say minutes or days: a series of one hour gets an hour each side
(plotly otherwise zooms into seconds: "08:09:55.6375"), and the wait target is drawn as a
visible bar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from chargeback.ops import charts
from chargeback.ops.selectors import FragmentationPoint, QueueWaits

AT = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)


def test_one_hour_of_history_spans_an_hour_each_side():
    figure = charts.fragmentation_over_time([FragmentationPoint("h100", AT, Decimal(8), {"8": 0})])
    axis = figure["layout"]["xaxis"]
    assert axis["range"] == ["2026-12-05 07:00", "2026-12-05 09:00"]
    assert axis["tickformat"] == "%H:%M<br>%b %d" and axis["automargin"] is True


def test_several_hours_let_plotly_choose_the_range():
    series = {"Fragmentation": [(AT, Decimal(1)), (AT + timedelta(hours=1), Decimal(2))]}
    axis = charts.pending_over_time(series)["layout"]["xaxis"]
    assert "range" not in axis and axis["type"] == "date"


def test_the_wait_target_is_a_visible_bar():
    rows = [QueueWaits("batch", timedelta(hours=2), None, timedelta(hours=3), 4)]
    [_, _, target] = charts.waits(rows)["data"]
    assert target["y"] == [120.0]
    assert target["marker"]["symbol"] == "line-ew" and target["marker"]["line"]["width"] == 3


def test_one_hour_of_history_draws_a_point_not_an_invisible_line():
    pending = charts.pending_over_time({"QuotaExceeded": [(AT, Decimal(2))]})
    free = charts.fragmentation_over_time([FragmentationPoint("h100", AT, Decimal(8), {"8": 0})])

    assert [t["mode"] for t in pending["data"]] == ["lines+markers"]
    assert [t["mode"] for t in free["data"]] == ["lines+markers", "lines+markers"]
