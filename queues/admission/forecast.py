"""The forecast: every waiting job's and probe's estimated start, by replaying the engine's own
pass forward in time from the state the plan's pass left (see ``forecast``)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from queues.admission.asks import Ask
from queues.admission.estimate import Memo, simulate
from queues.admission.never import never_fits
from queues.admission.pass_state import Pass
from queues.admission.plan import EstimatedStart
from queues.admission.projection import FORECAST_HORIZON, Tail, TailRun, combine_tail
from queues.admission.scheduler import consider, probe_fits_now
from queues.admission.snapshot import (
    NO_HISTORY,
    Forecast,
    JobId,
)
from queues.admission.state import Alloc, Placement, State

# ---------------------------------------------------------------------- the forecast

# Job checks one replay may spend (waiting jobs × passes) before the per-class simulation of
# ``estimate`` takes over the rest of the forecast: the replay is exact, the simulation fast.
# Up to four replays per plan (one per distinct scenario): at 2,500 each, on the benchmark's
# 4,000-GPU cluster a queue of about 200 waiting jobs is replayed exactly for a dozen moments;
# from about 500 waiting none is (``FIRST_EXACT_PASSES``; docs/benchmarks.md, docs/admission.md
# "Cost, and its bound"); what-ifs (``explain``) spend a fifth of it.
REPLAY_BUDGET = 2_500
WHAT_IF_REPLAY_BUDGET = 500
# With a horizon of H starts, the simulation takes the first HEAD_PER_START × H waiting jobs
# in plan order; the rest join the projection (``projection``) behind those it did not start.
HEAD_PER_START = 5
# Moments the shadow walks of a replay's pass visit (``backfill``) that cost as much as one job
# check: a pass with many deep shadows over a big class spends the budget sooner.
WALKED_PER_CHECK = 1
# The scenarios after the first replay the engine's own passes only while the first does
# (``FIRST_EXACT_PASSES``) and the budget holds at least this many passes over the jobs
# waiting; with more waiting the first scenario's replay alone runs them (its start of the
# queue exact) and the others simulate from the start: on the benchmark's cluster at 1,000
# waiting the later scenarios' estimates moved by 0.3 % at most for nine jobs in ten, and the
# forecast cost a third less.
LATER_EXACT_PASSES = 8
# The first scenario's replay runs the engine's own passes only while the budget holds at least
# this many of them, each counted at what one over the replay's jobs is expected to cost: a job
# check per job waiting (not held back) and probe, and the moments the plan's own pass's shadows
# walked (``forecast``'s ``walked``). A budget for a single pass makes one moment exact and
# costs about as much as simulating every other moment of that scenario (on the benchmark's
# cluster at 1,000 pending a pass walks 1,750 moments; docs/benchmarks.md).
FIRST_EXACT_PASSES = 2
# A waiting job's estimate when the plan skipped the forecast (``plan(estimates=False)``).
NOT_ESTIMATED = (
    "being computed: with this many jobs waiting, estimates are refreshed every few seconds to a"
    " minute"
)

Scenario = Callable[[Forecast], float]
SCENARIOS: tuple[tuple[str, Scenario], ...] = (
    ("latest", lambda f: 1.0),
    ("likely", lambda f: f.likely),
    ("low", lambda f: f.low),
    ("high", lambda f: f.high),
)


def forecast(
    state: State,
    asks: Sequence[Ask],
    probes: Sequence[Ask],
    *,
    budget: int = REPLAY_BUDGET,
    kept: Mapping[JobId, tuple[str, Placement]] | None = None,
    horizon: int | None = FORECAST_HORIZON,
    walked: int = 0,
    landing: dict[JobId, tuple[datetime, tuple[str, ...]]] | None = None,
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]:
    """The estimated start of every waiting ask and probe, after this plan's pass on ``state``
    (consumed); ``kept``: the nodes the pass's head-of-queue reservations chose
    (``Pass.reserved_nodes``), which each replay's first pass takes first, as every later pass
    takes those of the pass before it; ``walked``: the moments the plan's pass's shadows walked,
    in job checks, what a replay's pass is expected to walk (``FIRST_EXACT_PASSES``);
    ``landing``: filled with the jobs the first scenario (at the latest) starts on nodes not
    there yet (``State.landing``).

    Four replays of the engine's own policy forward in time, from the state the pass left: at
    each moment something ends, opens or returns, the same pass (``consider``: plan order,
    head-of-queue reservations, backfill, gangs) runs again on the jobs still waiting, without
    preemption and with nothing new arriving. They differ only in how long jobs run: their
    runtime limits, their predicted runtimes (``likely``), and their 10th and 90th percentiles
    (the interval ``range_low``–``range_high``); ``at`` is the latest of the four (see
    ``_combine``). With runtimes equal to the limits and nothing new arriving, each job starts
    when the first replay says: exactly ``at`` when no job has runtime history. Scenarios that
    give every job the same runtime are replayed once (with no history at all, one replay).

    With more than ``horizon`` jobs waiting (None: no horizon), each replay takes the first
    ``HEAD_PER_START`` × ``horizon`` of them and stops once ``horizon`` have started; the rest
    are projected (``projection``: estimates with ``projected`` set).
    """
    snapshot = state.snapshot
    forecasts: dict[JobId, Forecast] = {}
    started: dict[JobId, tuple[datetime, timedelta]] = {}
    for job in snapshot.running:
        forecasts[job.id] = job.forecast or NO_HISTORY
        started[job.id] = (job.started_at or state.now, job.runtime_limit)
    for pending in snapshot.pending:
        forecasts[pending.id] = pending.forecast or NO_HISTORY
    results: dict[str, tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]] = {}
    mark = state.checkpoint()
    # A replay depends on the scenario only through each job's ratio: scenarios that give every
    # job the same ratio (all of them when no job has history; "high" and "latest" when every
    # job's 90th percentile is its limit) are one replay. The jobs' distinct forecasts say.
    # (by their values as tuples: a frozen dataclass's hash and equality cost three times more,
    # over tens of thousands of jobs)
    distinct = {(f.likely, f.low, f.high): f for f in (NO_HISTORY, *forecasts.values())}.values()
    replayed: dict[tuple[float, ...], str] = {}
    memo = Memo()  # what every replay's simulation may reuse (why a job can never start...)
    # the class the first replay started each job on, simulated or projected; the others keep it
    chosen: dict[JobId, str] = {}
    # The head of the queue is replayed exactly, the tail projected behind it (``project``).
    if horizon is not None and len(asks) <= max(1, horizon):
        horizon = None  # every start is simulated
    elif horizon is not None:
        horizon = max(1, horizon)
    cut = len(asks) if horizon is None else HEAD_PER_START * horizon
    head, tail = asks[:cut], asks[cut:]
    last = head[-1].order if tail else math.inf
    head_probes = [p for p in probes if p.order <= last]
    # what may start of the tail, worked out once for every scenario; what may not, told why
    behind, tail_never, tail_probe_never = _tail(state, tail, [p for p in probes if p.order > last])
    tails: dict[str, tuple[datetime, list[float]]] = {}  # the tail's starts, by scenario
    checks = sum(ask.held_until is None for ask in head) + len(head_probes)
    exact_first = (checks + walked) * FIRST_EXACT_PASSES <= budget
    exact_later = exact_first and (len(head) + len(head_probes)) * LATER_EXACT_PASSES <= budget
    for name, pick in SCENARIOS:
        ratios = tuple(pick(f) for f in distinct)
        same = replayed.get(ratios)
        if same is not None:
            results[name] = results[same]
            if same in tails:
                tails[name] = tails[same]
            continue
        if replayed:
            state.rollback(mark)
        state.landing = landing if not replayed else None
        replayed[ratios] = name

        def ratio(job_id: JobId, pick: Scenario = pick) -> float:
            return pick(forecasts.get(job_id, NO_HISTORY))

        starts, probe_starts, projected = _replay(
            state,
            head,
            head_probes,
            ratio,
            started,
            budget if (exact_first and len(replayed) == 1) or exact_later else 0,
            dict(kept or {}),
            memo,
            (horizon, behind.run(pick) if behind is not None else None, chosen),
        )
        results[name] = (starts, probe_starts)
        if len(replayed) == 1 and horizon is not None:
            # the later scenarios keep where the first started each job, simulated or projected
            for job_id, start in starts.items():
                if start.gpu_class is not None and start.at is not None:
                    chosen.setdefault(job_id, start.gpu_class)
        if projected is not None:
            tails[name] = projected
        # (the tail's jobs are combined by ``combine_tail``; its probes as the head's)
        results[name][1].update(tail_probe_never)
    state.now = snapshot.now
    state.landing = None
    latest, probe_latest = results["latest"]
    estimates = {ask.job.id: _combine(ask.job.id, latest, results) for ask in head}
    estimates.update(tail_never)
    if behind is not None and behind.jobs:
        scenarios = [tails[name] for name, _ in SCENARIOS]
        estimates.update(combine_tail(behind, chosen, scenarios, snapshot.now))
    return (
        estimates,
        {
            probe.job.id: _combine(probe.job.id, probe_latest, results, probes=True)
            for probe in probes
        },
    )


def _combine(
    job_id: JobId,
    latest: dict[JobId, EstimatedStart],
    results: dict[str, tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]],
    *,
    probes: bool = False,
) -> EstimatedStart:
    """The estimate from the four replays: ``at`` the latest start of any (with backfill a job
    that ends early may let a gang go first and push a small job back, so the start when every
    job runs to its limit is not always the latest), ``likely`` the predicted one, and the
    interval from the 10th and 90th percentile replays, holding ``likely``."""
    bound = latest[job_id]
    at = bound.at
    if at is None:
        return bound
    side = 1 if probes else 0
    predicted = results["likely"][side][job_id]
    short = results["low"][side][job_id]
    long = results["high"][side][job_id]
    likely = predicted.at or at
    low = min(short.at or at, likely)
    high = max(long.at or at, likely)
    return EstimatedStart(
        at=max(at, high),
        why_unknown=bound.why_unknown,
        range_low=low,
        range_high=high,
        gpu_class=bound.gpu_class,
        likely=likely,
        # a projection in any scenario may be what is shown (``at`` is the latest of them)
        projected=bound.projected or predicted.projected or short.projected or long.projected,
    )


def _replay(
    state: State,
    asks: Sequence[Ask],
    probes: Sequence[Ask],
    ratio: Callable[[JobId], float],
    started: dict[JobId, tuple[datetime, timedelta]],
    budget: int,
    kept: dict[JobId, tuple[str, Placement]],
    memo: Memo,
    projected: tuple[int | None, TailRun | None, dict[JobId, str]],
) -> tuple[
    dict[JobId, EstimatedStart], dict[JobId, EstimatedStart], tuple[datetime, list[float]] | None
]:
    """One forecast replay (see ``forecast``); jobs run ``ratio`` of their limits; with a
    horizon (``projected``: it, the tail in this scenario, and the classes projected jobs
    were placed on), those it does not reach are projected; the third: where the projection
    began and the tail's projected starts, in seconds after it (``projection.combine_tail``)."""
    now = state.now
    started = dict(started)  # and when the replay starts each job
    events: list[tuple[datetime, int, int, object]] = []
    sequence = 0

    def push(when: datetime, kind: int, payload: object) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (when, kind, sequence, payload))

    def finish(alloc: Alloc) -> datetime:
        share = ratio(alloc.job_id)
        if share >= 1:
            return alloc.end
        # a job this plan admits starts now and runs to ``alloc.end`` at the latest
        since = started.get(alloc.job_id) or (now, alloc.end - now)
        return predicted_end(started=since, ratio=share, now=state.now, limit_end=alloc.end)

    runtime_of = _runtime_of(ratio)
    if sum(ask.held_until is None for ask in asks) + len(probes) > budget:
        # not one pass fits the budget: the simulation from now, without seeding the replay's
        # own events (the simulation seeds its own)
        return _simulate_rest(
            state, list(asks), list(probes), finish, runtime_of, projected, memo, 0
        )
    for alloc in state.allocs.values():
        push(finish(alloc), _END, alloc)
    for rid, reservation in state.reservations.items():
        for when, active in ((reservation.start, True), (reservation.end, False)):
            if when is not None and when > now:
                push(when, _RESERVATION, (rid, active))
    for index, node in enumerate(state.nodes):
        if not state.node_eligible[index] and node.healthy and node.maintenance_until is not None:
            push(max(now, node.maintenance_until), _NODE_BACK, index)
    waiting: list[Ask] = []
    for ask in asks:
        if ask.held_until is not None:
            push(max(now, ask.held_until), _HELD_ENDS, ask)
        else:
            waiting.append(ask)
    ghosts = list(probes)
    starts: dict[JobId, EstimatedStart] = {}
    probe_starts: dict[JobId, EstimatedStart] = {}
    while (waiting or ghosts or any(e[1] == _HELD_ENDS for e in events)) and events:
        if len(waiting) + len(ghosts) > budget:
            break
        when = events[0][0]
        joined = False
        while events and events[0][0] == when:
            _, kind, _, payload = heapq.heappop(events)
            if kind == _END:
                assert isinstance(payload, Alloc)
                state.give_back(payload)
            elif kind == _RESERVATION:
                assert isinstance(payload, tuple)
                state.set_reservation_active(payload[0], payload[1])
            elif kind == _NODE_BACK:
                assert isinstance(payload, int)
                state.set_node_eligible(payload, True)
            else:
                assert isinstance(payload, Ask)
                waiting.append(replace(payload, static=(), held_until=None))
                joined = True
        if joined:
            waiting.sort(key=lambda a: (a.order, a.job.id))
        state.now = when
        run = Pass(state=state, dry_run=False, preempt=False, explain=False, kept=kept)
        left: list[Ask] = []
        next_ghost = 0
        ghosts_left: list[Ask] = []
        for ask in waiting:
            while next_ghost < len(ghosts) and ghosts[next_ghost].order <= ask.order:
                _ghost_check(run, ghosts[next_ghost], probe_starts, ghosts_left)
                next_ghost += 1
            admitted = len(run.admissions)
            consider(run, ask)
            if len(run.admissions) > admitted:
                alloc = state.allocs[ask.job.id]
                starts[ask.job.id] = EstimatedStart(at=when, gpu_class=alloc.gpu_class)
                started[ask.job.id] = (when, ask.runtime)
                push(when + runtime_of(ask), _END, alloc)
            else:
                left.append(ask)
        for ghost in ghosts[next_ghost:]:
            _ghost_check(run, ghost, probe_starts, ghosts_left)
        budget -= len(waiting) + len(ghosts) + run.walked // WALKED_PER_CHECK
        kept = run.reserved_nodes()
        waiting, ghosts = left, ghosts_left
    held = [e[3] for e in events if e[1] == _HELD_ENDS]
    rest = [*waiting, *(a for a in held if isinstance(a, Ask))]
    more, more_probes, times = _simulate_rest(
        state, rest, ghosts, finish, runtime_of, projected, memo, len(starts)
    )
    more.update(starts)
    more_probes.update(probe_starts)
    return more, more_probes, times


def _simulate_rest(
    state: State,
    rest: list[Ask],
    ghosts: list[Ask],
    finish: Callable[[Alloc], datetime],
    runtime_of: Callable[[Ask], timedelta],
    projected: tuple[int | None, TailRun | None, dict[JobId, str]],
    memo: Memo,
    started: int,
) -> tuple[
    dict[JobId, EstimatedStart], dict[JobId, EstimatedStart], tuple[datetime, list[float]] | None
]:
    """What a replay's budget did not reach (``rest``, ``ghosts``, and with a horizon the tail;
    ``started``: the jobs its passes started): the per-class simulation from ``state.now``
    (``projected``: the replay's; ``memo``: what simulations of the same jobs reuse)."""
    horizon, tail, chosen = projected
    if not rest and not ghosts and tail is None:
        return {}, {}, None
    beyond: dict[str, Any] = {}
    if horizon is not None:
        beyond = {
            "horizon": max(0, horizon - started),
            "tail": tail,
            "memo": memo,
            "chosen": chosen,
        }
    origin = state.now
    more, more_probes, times = simulate(state, rest, ghosts, finish, runtime_of, **beyond)
    return more, more_probes, None if times is None else (origin, times)


def _tail(
    state: State,
    asks: Sequence[Ask],
    probes: Sequence[Ask],
) -> tuple[Tail | None, dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]:
    """The tail behind the simulated head (None: no tail) of what may start, and the estimates
    of the tail's jobs and probes that never start (why)."""
    if not asks and not probes:
        return None, {}, {}
    jobs: list[Ask] = []
    ghosts: list[Ask] = []
    results: dict[JobId, EstimatedStart] = {}
    probe_results: dict[JobId, EstimatedStart] = {}
    for items, kept, told in ((asks, jobs, results), (probes, ghosts, probe_results)):
        for ask in items:
            # (no simulation takes a tail job: its verdict is not kept in ``never``)
            reason = never_fits(state, ask)
            if reason is not None:
                told[ask.job.id] = EstimatedStart(at=None, why_unknown=reason.message)
            else:
                kept.append(ask)
    tail = Tail.of(jobs, ghosts, lambda ask: ask.job.forecast or NO_HISTORY)
    return tail, results, probe_results


def _runtime_of(ratio: Callable[[JobId], float]) -> Callable[[Ask], timedelta]:
    """How long a job started in a replay runs when jobs run ``ratio`` of their limits."""

    def runtime_of(ask: Ask) -> timedelta:
        return ask.runtime * ratio(ask.job.id)

    return runtime_of


_END, _RESERVATION, _NODE_BACK, _HELD_ENDS = 0, 1, 2, 3


def _ghost_check(
    run: Pass, ghost: Ask, found: dict[JobId, EstimatedStart], left: list[Ask]
) -> None:
    if probe_fits_now(run, ghost):
        found[ghost.job.id] = EstimatedStart(at=run.state.now)
    else:
        left.append(ghost)


def predicted_end(
    *, started: tuple[datetime, timedelta], ratio: float, now: datetime, limit_end: datetime
) -> datetime:
    """When a job that started at ``started[0]`` with runtime limit ``started[1]`` is predicted
    to end if it runs ``ratio`` of its limit (``limit_end``: when the limit runs out); one that
    already ran longer than that is predicted to use the same share of the time it has left.
    The estimates and chargeback's forecast both use it."""
    if ratio >= 1:
        return limit_end
    start, limit = started
    predicted = start + limit * ratio
    if predicted > now:
        return predicted
    return now + (limit_end - now) * ratio
