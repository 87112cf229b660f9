"""Beyond the forecast's horizon, estimates are projected from the work queued ahead of each job
(``queues/admission/projection.py``): on a quota that runs one job at a time the projection is
the simulation's exact answer; a probe there queues no work; a job goes to the class where it
starts first; on the benchmark's cluster the projected estimates stay close to simulating every
job, and the plan's decisions are the same."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from bench.bench_admission import build_snapshot, with_probes
from queues.admission import Forecast, Plan, Snapshot, plan, projection
from queues.admission.asks import Ask, build_asks
from queues.admission.forecast import _combine
from queues.admission.plan import PROJECTED_NOTE, EstimatedStart
from queues.admission.snapshot import NO_HISTORY
from queues.admission.state import State
from queues.admission.testing import (
    NOW,
    node,
    pending,
    play,
    queue,
    reservation,
    running,
    snapshot,
    team,
)
from tests.queues.admission.strategies import PROPERTIES, snapshots, snapshots_with_probes

H100, T4 = "h100-80gb", "t4-16gb"
HOUR = timedelta(hours=1)
QUEUES = (
    queue("training", default_runtime=HOUR),
    queue("cheap", default_runtime=HOUR, gpu_classes=(T4, H100)),
)


def _hours(at: datetime | None) -> float | None:
    return None if at is None else (at - NOW) / HOUR


def _estimates(result: Plan) -> dict[int, tuple[float | None, ...]]:
    return {
        s.job_id: (
            _hours(s.estimated_start.at),
            _hours(s.estimated_start.likely),
            _hours(s.estimated_start.range_low),
            _hours(s.estimated_start.range_high),
        )
        for s in result.pending
    }


def one_at_a_time(forecast: Forecast | None = None) -> Snapshot:
    """Team nlp may hold 8 H100 of 32; its 8-GPU job ends in an hour, five more of an hour
    each wait, submitted one after another."""
    start = snapshot(
        nodes=[node(f"n{i}") for i in range(4)],
        queues=QUEUES,
        teams=[team("nlp", {H100: 8})],
        running=[running(1, "nlp", "n0", gpus=8, started=3 * HOUR, runtime=4 * HOUR)],
        pending=[
            pending(10 + i, "nlp", gpus=8, waited=timedelta(minutes=10 - i), runtime_limit=HOUR)
            for i in range(5)
        ],
    )
    if forecast is None:
        return start
    return replace(
        start,
        running=tuple(replace(j, forecast=forecast) for j in start.running),
        pending=tuple(replace(j, forecast=forecast) for j in start.pending),
    )


def test_on_a_quota_that_holds_one_job_the_projection_is_the_simulation() -> None:
    # A horizon of one start: the first job is simulated, the four behind it projected. The
    # quota runs one job at a time, so each starts when the one before it ends, in every
    # scenario (likely half the limit, the interval a quarter to the whole of it).
    for forecast in (None, Forecast(0.5, 0.25, 1.0)):
        start = one_at_a_time(forecast)
        simulated = _estimates(plan(start, horizon=None, replay_budget=0))
        projected = _estimates(plan(start, horizon=1, replay_budget=0))
        assert projected == simulated
    assert projected[14] == (5.0, 2.5, 1.25, 5.0)
    assert [projected[10 + i][0] for i in range(5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # a projected estimate says so (the job's page and the client show the note)
    notes = {
        s.job_id: s.estimated_start.note
        for s in plan(one_at_a_time(), horizon=1, replay_budget=0).pending
    }
    assert notes == {
        10: "",
        11: PROJECTED_NOTE,
        12: PROJECTED_NOTE,
        13: PROJECTED_NOTE,
        14: PROJECTED_NOTE,
    }


def test_a_probe_beyond_the_horizon_is_estimated_and_delays_nobody() -> None:
    start = one_at_a_time()
    # the team's default 8-GPU job, asked about now: it stands behind the five waiting
    probe = pending(900, "nlp", gpus=8, waited=timedelta(0), runtime_limit=HOUR)
    probed = replace(start, probes=(probe,))
    without = plan(start, horizon=1, replay_budget=0)
    result = plan(probed, horizon=1, replay_budget=0)
    assert _estimates(result) == _estimates(without)
    # it starts when the fifth ends
    assert [_hours(e.at) for _, e in result.probe_estimates] == [6.0]


def test_beyond_the_horizon_a_job_goes_to_the_class_where_it_starts_first() -> None:
    # One T4 node (8) and one H100 node (8), both held for two hours; the cheap queue's jobs
    # may use either. Six 8-GPU jobs of an hour: after the simulated first, the projection
    # fills both classes two by two, each job on the class that frees first, as the engine's
    # own passes do (``play``).
    start = snapshot(
        nodes=[node("t", gpu_class=T4), node("h")],
        queues=QUEUES,
        teams=[team("cv", {T4: 8, H100: 8})],
        running=[
            running(1, "cv", "t", gpus=8, gpu_class=T4, started=2 * HOUR, runtime=4 * HOUR),
            running(2, "cv", "h", gpus=8, started=2 * HOUR, runtime=4 * HOUR),
        ],
        pending=[
            pending(
                10 + i,
                "cv",
                "cheap",
                "small-inference",
                gpus=8,
                waited=timedelta(minutes=10 - i),
                runtime_limit=HOUR,
            )
            for i in range(6)
        ],
    )
    projected = plan(start, horizon=1, replay_budget=0)
    started = play(start)
    assert _estimates(projected) == {job: (_hours(at),) * 4 for job, at in started.items()}
    assert [_estimates(projected)[10 + i][0] for i in range(6)] == [2.0, 2.0, 3.0, 3.0, 4.0, 4.0]
    classes = {s.job_id: s.estimated_start.gpu_class for s in projected.pending}
    assert sorted(classes[10 + i] for i in range(2, 6)) == [H100, H100, T4, T4]


def test_on_the_benchmark_cluster_projected_estimates_stay_close_to_simulated_ones() -> None:
    # 3,000 pending on 4,000 GPUs: about 2,300 wait. With a horizon of 1,000 starts all of
    # them are simulated until 1,000 have started, and the rest projected. (The projection
    # is meant for long queues, deep in them: with a few hours' wait at most its answers are
    # further off than with ten thousand waiting, docs/benchmarks.md.)
    start = build_snapshot(3000)
    simulated = plan(start, horizon=None)
    projected = plan(start, horizon=1000)
    # the decisions and reasons are the plan's, whatever the forecast (the reasons about the
    # class a job is estimated to start on come first, and that may differ)
    assert projected.admissions == simulated.admissions
    assert projected.preemptions == simulated.preemptions
    assert [sorted(r.message for r in s.reasons) for s in projected.pending] == [
        sorted(r.message for r in s.reasons) for s in simulated.pending
    ]
    exact = {s.job_id: s.estimated_start for s in simulated.pending}
    deviations: dict[str, list[float]] = {"at": [], "likely": [], "range_low": [], "range_high": []}
    for status in projected.pending:
        estimate, truth = status.estimated_start, exact[status.job_id]
        assert (estimate.at is None) == (truth.at is None), status.job_id
        if estimate.at is None or estimate.likely is None:
            assert estimate == truth  # none, or the pass's own start (after a preemption)
            continue
        assert estimate.range_low is not None and estimate.range_high is not None
        assert estimate.range_low <= estimate.likely <= estimate.range_high <= estimate.at
        for name, values in deviations.items():
            mine, theirs = getattr(estimate, name), getattr(truth, name)
            if theirs > NOW:
                values.append(abs((mine - theirs) / (theirs - NOW)))
    for name, values in deviations.items():
        assert len(values) > 2000
        assert statistics.median(values) <= 0.25, name


def test_beyond_the_horizon_a_job_that_can_never_start_says_so_and_delays_nobody() -> None:
    # job 15 needs 2 × 8 GPUs of a team that may hold 8; job 16 behind it starts when the
    # fifth ends, as simulated; a probe of the same shape can never start either
    start = replace(
        one_at_a_time(),
        pending=(
            *one_at_a_time().pending,
            pending(15, "nlp", gpus=8, pods=2, waited=timedelta(minutes=4), runtime_limit=HOUR),
            pending(16, "nlp", gpus=8, waited=timedelta(minutes=3), runtime_limit=HOUR),
        ),
        probes=(pending(900, "nlp", gpus=8, pods=2, waited=timedelta(0), runtime_limit=HOUR),),
    )
    simulated = plan(start, horizon=None, replay_budget=0)
    projected = plan(start, horizon=1, replay_budget=0)
    assert _estimates(projected) == _estimates(simulated)
    assert _estimates(projected)[16][0] == 6.0
    never = projected.status(15)
    assert never is not None and never.estimated_start.at is None
    assert never.estimated_start.why_unknown.startswith("can never start")
    [(_, probe)] = projected.probe_estimates
    assert probe.at is None and probe.why_unknown.startswith("can never start")


def test_a_quota_of_one_job_at_a_time_stays_so_beside_another_teams_many_small_jobs() -> None:
    # nlp's one-at-a-time quota beside cv's 200 one-GPU jobs of ten hours on four T4 nodes:
    # what a job in flight has left is reckoned per line (nlp's: none), and the first job
    # waiting beyond the simulation's first start (a cv job) does not hold nlp's back
    start = snapshot(
        nodes=[
            *(node(f"n{i}") for i in range(4)),
            *(node(f"t{i}", gpu_class=T4) for i in range(4)),
        ],
        queues=QUEUES,
        teams=[team("nlp", {H100: 8}), team("cv", {T4: 32})],
        running=[running(1, "nlp", "n0", gpus=8, started=3 * HOUR, runtime=4 * HOUR)],
        pending=[
            *(
                pending(10 + i, "nlp", gpus=8, waited=timedelta(minutes=10 - i), runtime_limit=HOUR)
                for i in range(5)
            ),
            *(
                pending(
                    100 + i,
                    "cv",
                    "training",
                    "small-inference",
                    gpus=1,
                    waited=timedelta(minutes=5),
                    runtime_limit=10 * HOUR,
                )
                for i in range(200)
            ),
        ],
    )
    simulated = _estimates(plan(start, horizon=None, replay_budget=0))
    projected = _estimates(plan(start, horizon=1, replay_budget=0))
    assert [projected[10 + i][0] for i in range(5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # cv's jobs start 32 at a time every ten hours; projected within a tenth and a half
    for job in (140, 200, 299):
        at, truth = projected[job][0], simulated[job][0]
        assert at is not None and truth is not None
        assert abs(at - truth) <= 0.15 * truth, (job, at, truth)


def test_a_horizon_below_one_start_counts_as_one() -> None:
    start = one_at_a_time()
    assert _estimates(plan(start, horizon=0, replay_budget=0)) == _estimates(
        plan(start, horizon=1, replay_budget=0)
    )


def _apart(one: Plan, other: Plan) -> float:
    """The largest gap, in seconds, between the two plans' estimates (jobs' and probes')."""
    ones = [(s.job_id, s.estimated_start) for s in one.pending] + list(one.probe_estimates)
    others = [(s.job_id, s.estimated_start) for s in other.pending] + list(other.probe_estimates)
    assert [job for job, _ in ones] == [job for job, _ in others]
    gap = 0.0
    for (job, mine), (_, theirs) in zip(ones, others, strict=True):
        assert (mine.gpu_class, mine.why_unknown, mine.projected) == (
            theirs.gpu_class,
            theirs.why_unknown,
            theirs.projected,
        ), job
        for name in ("at", "likely", "range_low", "range_high"):
            a, b = getattr(mine, name), getattr(theirs, name)
            assert (a is None) == (b is None), (job, name)
            if a is not None:
                gap = max(gap, abs((a - b).total_seconds()))
    return gap


def _job_by_job(start: Snapshot, horizon: int) -> Plan:
    """The plan with every scenario's tail projected job by job (the way the first scenario,
    which chooses the classes, always does)."""
    was = projection._VECTORIZED
    projection._VECTORIZED = False
    try:
        return plan(start, horizon=horizon)
    finally:
        projection._VECTORIZED = was


def test_the_tail_projected_at_once_is_the_tail_projected_job_by_job() -> None:
    # 3,000 pending with a horizon of 200 starts: each simulation takes the first 1,000 of the
    # 2,300 waiting; the rest (and most of the 60 probes) are the tail. The scenarios after the
    # first keep the classes it chose and project the tail at once; job by job gives the same
    # estimates (to float rounding), and the at-once path did run.
    start = with_probes(build_snapshot(3000), 5)
    ran: list[bool] = []
    real = projection._Kept.of.__func__  # type: ignore[attr-defined]

    def spy(cls: type, *args: object) -> object:
        found = real(cls, *args)
        ran.append(found is not None)
        return found

    projection._Kept.of = classmethod(spy)  # type: ignore[method-assign, assignment]
    try:
        at_once = plan(start, horizon=200)
    finally:
        projection._Kept.of = classmethod(real)  # type: ignore[method-assign, assignment]
    assert ran == [False, True, True, True]
    assert sum(s.estimated_start.projected for s in at_once.pending) > 1000
    assert _apart(at_once, _job_by_job(start, 200)) < 0.001


def test_probes_at_the_same_place_in_the_tail_each_see_the_work_queued_ahead_of_them() -> None:
    # Two probes of one team in one queue stand at the same place in plan order (same priority,
    # team and submit time), deep in the tail; one asks for H100s, the other for any 40 GB GPU.
    # Projected at once, each probe reads the work the tail's jobs queued ahead of it on its own
    # classes, as job by job: once, the second read the classes' work as it was before the tail.
    start = build_snapshot(3000)
    first = replace(
        start.pending[0], id=900_001, queue="batch", capability="h100", pods=1, gpus_per_pod=8
    )
    second = replace(first, id=900_002, capability="any-40gb", gpus_per_pod=4)
    start = replace(start, probes=(first, second))
    at_once = plan(start, horizon=200)
    by_job = _job_by_job(start, 200)
    estimates = dict(at_once.probe_estimates)
    assert [estimates[900_001].projected, estimates[900_002].projected] == [True, True]
    assert _apart(at_once, by_job) < 0.001


FORECASTS = (Forecast(0.5, 0.25, 1.0), Forecast(0.8, 0.4, 0.95), Forecast(0.3, 0.1, 0.7))


@PROPERTIES
@given(
    start=st.one_of(snapshots(3, 24), snapshots_with_probes(3, 24)),
    forecasts=st.lists(st.sampled_from(FORECASTS), min_size=24, max_size=24),
    backoffs=st.lists(st.sampled_from((None, None, None, 1, 30)), min_size=24, max_size=24),
)
def test_beyond_the_horizon_at_once_and_job_by_job_agree(
    start: Snapshot, forecasts: list[Forecast], backoffs: list[int | None]
) -> None:
    # random small clusters, quotas, reservations, up to 24 jobs with runtime forecasts (so
    # that the scenarios differ), some held back after roll-backs (for 1 or 30 hours), and
    # probes; a horizon of one start, so the simulations take the first five waiting and the
    # rest is the tail (in about a third of the examples the later scenarios project a tail at
    # once)
    start = replace(
        start,
        pending=tuple(
            replace(
                job,
                forecast=forecasts[i],
                not_before=None if backoffs[i] is None else NOW + backoffs[i] * HOUR,
            )
            for i, job in enumerate(start.pending)
        ),
    )
    assert _apart(plan(start, horizon=1), _job_by_job(start, 1)) < 0.001


def test_a_job_the_first_scenario_started_on_a_reservation_is_projected_on_what_it_may_use() -> (
    None
):
    # nlp holds 8 T4 (one job at a time) and a reservation of 8 H100 opening in three hours;
    # job 11 (T4 or H100) starts on the reservation when it opens in the first scenario's
    # simulation. In the shorter scenarios it is projected, and the projection counts no
    # reservation outside a reservation-only queue: on H100 it would never start, so it
    # chooses again there (T4), and the T4 jobs behind it wait for it as when every job is
    # simulated, the interval included.
    forecast = Forecast(0.5, 0.1, 1.0)
    t4_only = queue("t4only", default_runtime=HOUR, gpu_classes=(T4,))
    start = snapshot(
        nodes=[node("h0"), node("t0", gpu_class=T4)],
        queues=(*QUEUES, t4_only),
        teams=[team("nlp", {T4: 8})],
        reservations=[reservation(1, "nlp", 8, H100, start=NOW + 3 * HOUR)],
        running=[running(1, "nlp", "t0", gpus=8, gpu_class=T4, queue="t4only", runtime=10 * HOUR)],
        pending=[
            pending(10, "nlp", "t4only", gpus=8, waited=timedelta(minutes=20), runtime_limit=HOUR),
            pending(11, "nlp", "cheap", gpus=8, waited=timedelta(minutes=19), runtime_limit=HOUR),
            *(
                pending(
                    12 + i,
                    "nlp",
                    "t4only",
                    gpus=8,
                    waited=timedelta(minutes=9 - i),
                    runtime_limit=HOUR,
                )
                for i in range(6)
            ),
        ],
    )
    start = replace(
        start,
        running=tuple(replace(j, forecast=forecast) for j in start.running),
        pending=tuple(replace(j, forecast=forecast) for j in start.pending),
    )
    simulated = _estimates(plan(start, horizon=None, replay_budget=0))
    projected = _estimates(plan(start, horizon=1, replay_budget=0))
    assert projected == simulated
    assert projected[11] == (3.0, 3.0, 1.0, 3.0)
    assert [projected[12 + i][2] for i in range(6)] == [1.1, 1.2, 1.3, 1.4, 1.5, 1.6]


@PROPERTIES
@given(
    latest=st.lists(st.floats(0, 1e6) | st.just(math.inf), min_size=1, max_size=8),
    shares=st.lists(st.tuples(st.floats(0.1, 1), st.floats(0.01, 1), st.floats(0.1, 1))),
    gaps=st.lists(st.sampled_from((None, 0.0, 3600.0)), min_size=4, max_size=4),
    held=st.lists(st.sampled_from((None, 1.0, 50_000.0)), min_size=8, max_size=8),
)
def test_the_tails_estimates_combined_at_once_are_the_scenarios_combined_one_by_one(
    latest: list[float],
    shares: list[tuple[float, float, float]],
    gaps: list[float | None],
    held: list[float | None],
) -> None:
    # each scenario's projected starts of a tail (inf: none found), from origins that may lie
    # after now (an exact replay went ahead first), some jobs backed off until some hour:
    # combined at once, or each made an estimate (as a projection makes them) and combined as a
    # waiting job's four are (``forecast._combine``) -- the same estimates
    jobs = [
        replace(
            ask,
            job=replace(ask.job, id=index),
            held_until=None if held[index] is None else NOW + timedelta(seconds=held[index]),
        )
        for index, ask in enumerate([_ask()] * len(latest))
    ]
    tail = projection.Tail.of(jobs, [], lambda ask: NO_HISTORY)
    scenarios = []
    for scenario in range(4):
        origin = NOW + timedelta(seconds=gaps[scenario] or 0.0)
        times = [
            when
            if scenario == 0 or when == math.inf
            else when * shares[index % len(shares)][scenario - 1]
            if shares
            else when
            for index, when in enumerate(latest)
        ]
        scenarios.append((origin, times))
    chosen = dict.fromkeys(range(len(jobs)), H100)
    at_once = projection.combine_tail(tail, chosen, scenarios, NOW)
    one_by_one: dict[str, tuple[dict[int, EstimatedStart], dict[int, EstimatedStart]]] = {}
    for name, (origin, times) in zip(("latest", "likely", "low", "high"), scenarios, strict=True):
        one_by_one[name] = (
            {
                ask.job.id: _one_estimate(ask, origin, when)
                for ask, when in zip(jobs, times, strict=True)
            },
            {},
        )
    for ask in jobs:
        mine = at_once[ask.job.id]
        theirs = _combine(ask.job.id, one_by_one["latest"][0], one_by_one)
        assert mine.why_unknown == theirs.why_unknown
        assert mine.projected == theirs.projected
        for name in ("at", "likely", "range_low", "range_high"):
            a, b = getattr(mine, name), getattr(theirs, name)
            assert (a is None) == (b is None)
            if a is not None:
                assert abs((a - b).total_seconds()) < 1e-5, name


def _ask() -> Ask:
    start = one_at_a_time()
    return build_asks(State(start))[0]


def _one_estimate(ask: Ask, origin: datetime, when: float) -> EstimatedStart:
    if when == math.inf:
        return EstimatedStart(
            at=None, why_unknown="no start found: no capacity it may use frees up"
        )
    at = origin + timedelta(seconds=when)
    if ask.held_until is not None and ask.held_until > at:
        at = ask.held_until
    return EstimatedStart(at, "", None, None, H100, projected=True)
