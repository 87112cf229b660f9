"""A plan runs with Python's cyclic garbage collector paused (``engine._cycles_collected_after``)
and leaves it as it found it: on, off, or on again after a plan that failed midway."""

from __future__ import annotations

import gc

import pytest

from queues.admission import Snapshot, engine, plan
from queues.admission.testing import node, pending, running, snapshot, team


def _busy() -> Snapshot:
    """One GPU, busy for another hour; two jobs wait for it."""
    return snapshot(
        nodes=[node("n1", gpus=1)],
        teams=[team("vision", {"h100-80gb": 1})],
        running=[running(1, "vision", "n1")],
        pending=[pending(2, "vision"), pending(3, "vision")],
    )


def test_the_collector_is_paused_while_a_plan_runs_and_on_again_after(monkeypatch) -> None:
    seen: list[bool] = []
    forecast = engine.forecast

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return forecast(*args, **kwargs)

    monkeypatch.setattr(engine, "forecast", watched)
    assert gc.isenabled()
    result = plan(_busy())
    assert seen == [False]  # the jobs wait: the forecast ran, the collector paused
    assert result.status(3).estimated_start.at is not None
    assert gc.isenabled()


def test_a_plan_leaves_a_paused_collector_paused() -> None:
    gc.disable()
    try:
        plan(_busy())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_on_again_after_a_plan_that_failed(monkeypatch) -> None:
    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("forecast failed")

    monkeypatch.setattr(engine, "forecast", broken)
    with pytest.raises(RuntimeError, match="forecast failed"):
        plan(_busy())
    assert gc.isenabled()
