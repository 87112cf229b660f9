"""The reservation search (``backfill._reserve``: bisection over the class's running sums) finds
exactly what the walk it replaced found (``walk_reference.reserve_by_walk``: every end from
now): the same start, nodes and room for every shadow of every pass, the forecast's replays
included, so the estimated starts are the replay's own."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import Phase, given, settings

from bench.bench_admission import build_snapshot
from queues.admission import Snapshot, backfill, plan
from queues.admission.fit import Option
from queues.admission.pass_state import Pass
from queues.admission.state import Pool
from tests.queues.admission.strategies import PROPERTIES, snapshots
from tests.queues.admission.walk_reference import reserve_by_walk


def _reservations(run: Pass) -> tuple:
    """Every shadow's and quota shadow's fields, as plain values."""
    return (
        {
            gpu_class: [
                (
                    s.job_id,
                    s.time,
                    s.end,
                    id(s.pool),
                    list(s.used),
                    s.eq,
                    list(s.extra),
                    s.eq_extra,
                    list(s.placement),
                )
                for s in shadows
            ]
            for gpu_class, shadows in run.shadows.items()
        },
        {
            key: [dataclasses.astuple(q) for q in quotas]
            for key, quotas in run.quota_shadows.items()
        },
    )


def _restore(run: Pass, saved: tuple) -> None:
    shadows, quotas = saved
    for gpu_class, rows in shadows.items():
        kept = run.shadows[gpu_class][: len(rows)]
        for shadow, row in zip(kept, rows, strict=True):
            shadow.extra = list(row[6])
            shadow.eq_extra = row[7]
        run.shadows[gpu_class] = kept
    for key in list(run.shadows):
        if key not in shadows:
            del run.shadows[key]
    for key, rows in quotas.items():
        kept = run.quota_shadows[key][: len(rows)]
        for quota, row in zip(kept, rows, strict=True):
            quota.total_room, quota.nominal_room = row[5], row[6]
        run.quota_shadows[key] = kept
    for key in list(run.quota_shadows):
        if key not in quotas:
            del run.quota_shadows[key]


@contextmanager
def compared_with_the_walk(seen: list[int]) -> Iterator[None]:
    search = backfill._reserve

    def both(run: Pass, ask, gpu_class: str, pool: Pool, option: Option) -> bool:
        before = _reservations(run)
        walked = run.walked
        by_walk = reserve_by_walk(run, ask, gpu_class, pool, option)
        after_walk = _reservations(run)
        _restore(run, before)
        assert _reservations(run) == before
        run.walked = walked  # the budget counts the search's own cost
        found = search(run, ask, gpu_class, pool, option)
        assert (found, _reservations(run)) == (by_walk, after_walk)
        seen.append(int(found))
        return found

    backfill._reserve = both
    try:
        yield
    finally:
        backfill._reserve = search


@settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
@given(snapshots(most_pending=12))
def test_the_search_reserves_what_the_walk_did(snapshot: Snapshot) -> None:
    seen: list[int] = []
    with compared_with_the_walk(seen):
        plan(snapshot)


def test_the_comparison_reaches_reservations() -> None:
    # the property above means something only if shadows are found (and missed) often
    seen: list[int] = []

    @settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
    @given(snapshots(most_pending=12))
    def run(snapshot: Snapshot) -> None:
        with compared_with_the_walk(seen):
            plan(snapshot)

    run()
    assert sum(seen) >= 200, (sum(seen), len(seen))
    assert len(seen) - sum(seen) >= 20, (sum(seen), len(seen))


def _left_shadow_by_shadow(pool: Pool | None, shadows: list) -> tuple[list[int] | None, int]:
    """What ``backfill.left_by`` answers, worked out from each shadow as it stands now."""
    view = None
    for shadow in shadows:
        if shadow.pool is pool:
            view = list(pool.free) if view is None else view
            view = [min(free, extra) for free, extra in zip(view, shadow.extra, strict=True)]
    return view, min(s.eq_extra for s in shadows)


@contextmanager
def left_compared_shadow_by_shadow(reused: list[bool]) -> Iterator[None]:
    left_by = backfill.left_by

    def both(state, pool, shadows, floors=None):
        before = set(floors[0]) if floors else set()
        left = left_by(state, pool, shadows, floors)
        assert left == _left_shadow_by_shadow(pool, shadows)
        if floors is not None:
            reused.append(len(floors[0]) == len(before))
        return left

    backfill.left_by = both
    try:
        yield
    finally:
        backfill.left_by = left_by


def test_what_shadows_leave_kept_between_admissions_is_what_each_leaves_now() -> None:
    # ``left_by`` keeps the least the shadows leave per node across a pass; each answer must
    # equal the one worked out from every shadow as it is now, and some must have been kept
    reused: list[bool] = []

    @settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
    @given(snapshots(most_nodes=8, most_pending=40))
    def run(snapshot: Snapshot) -> None:
        with left_compared_shadow_by_shadow(reused):
            plan(snapshot)

    run()
    assert sum(reused) >= 20, (sum(reused), len(reused))
    assert len(reused) - sum(reused) >= 20, (sum(reused), len(reused))


def test_what_shadows_leave_on_a_busy_cluster_is_what_each_leaves_now() -> None:
    # the benchmark's cluster (500 nodes, 2,000 running, 1,000 waiting): dozens of shadows on a
    # class, jobs backfilled between them, some still running when a shadow starts
    reused: list[bool] = []
    with left_compared_shadow_by_shadow(reused):
        plan(build_snapshot(1_000))
    assert sum(reused) >= 20, (sum(reused), len(reused))


if __name__ == "__main__":
    pytest.main([__file__])
