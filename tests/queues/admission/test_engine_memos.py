"""What the engine remembers within a plan answers what working it out afresh would: a reason's
"frees up by" hint (``diagnose._frees_hint``, which keeps what each job gives back across the
versions of its class) on hypothesis' snapshots and on the benchmark's busy cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import Phase, given, settings

from bench.bench_admission import build_snapshot
from queues.admission import Snapshot, diagnose, plan
from tests.queues.admission.strategies import PROPERTIES, snapshots


@contextmanager
def hints_compared_with_fresh(answers: list[str]) -> Iterator[None]:
    frees_hint = diagnose._frees_hint

    def both(state, ask, gpu_class, pool, view):  # type: ignore[no-untyped-def]
        hint = frees_hint(state, ask, gpu_class, pool, view)
        kept = (dict(state.releases_memo), dict(state.release_devices))
        state.releases_memo.clear()
        state.release_devices.clear()
        try:
            assert frees_hint(state, ask, gpu_class, pool, view) == hint
        finally:
            state.releases_memo.clear()
            state.release_devices.clear()
            state.releases_memo.update(kept[0])
            state.release_devices.update(kept[1])
        answers.append(hint)
        return hint

    diagnose._frees_hint = both
    try:
        yield
    finally:
        diagnose._frees_hint = frees_hint


def test_a_frees_up_hint_is_what_the_jobs_give_back_now() -> None:
    answers: list[str] = []

    @settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
    @given(snapshots(most_nodes=8, most_pending=40))
    def run(snapshot: Snapshot) -> None:
        with hints_compared_with_fresh(answers):
            plan(snapshot)

    run()
    assert sum(1 for a in answers if "free up by" in a or "frees up by" in a) >= 50, len(answers)


def test_a_frees_up_hint_on_a_busy_cluster_is_what_the_jobs_give_back_now() -> None:
    answers: list[str] = []
    with hints_compared_with_fresh(answers):
        plan(build_snapshot(1_000))
    assert sum(1 for a in answers if "up by" in a) >= 20, len(answers)
