"""The planner: one pass over pending jobs in order, then a forward simulation for estimates.

``plan(snapshot)`` is the engine's entry point. The pass considers jobs in plan order (see
``asks.build_asks``). For each job it tries its GPU classes cheapest first and admits it where it
fits now; otherwise it tries preemption (only jobs of ``graceful``/``preemptible`` queues: borrowed
work reclaimed by reservation holders and by lenders while its team borrows, or the team's own
lower-priority work), and otherwise explains why it waits. Each job that does not start gets a
shadow, a reservation of its start (conservative backfill, ``_reserve``): the earliest time it
fits for its whole runtime on the class's capacity and its team's quota, behind the shadows ahead
of it. A later job may start only where it delays none of them.

Probes (``Snapshot.probes``, hypothetical jobs) are checked at their place in plan order with the
same rules, read-only: one that would fit then is estimated to start now; the others ride along in
the forward simulation as ghosts (see ``estimate``). They never take capacity, preempt, or set a
shadow, so the plan for real jobs is the same with or without them.

Speed: jobs the planner would treat alike (same queue, team, capability, shape, runtime) share one
cached verdict per version of the capacity they depend on, so a full cluster costs one check per
distinct shape rather than one per job.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from queues.admission.asks import Ask, build_asks, build_probe_asks
from queues.admission.diagnose import class_causes, entitlement, eq_json, eq_text, time_text
from queues.admission.elastic import elastic_plan
from queues.admission.estimate import simulate
from queues.admission.fit import Fit, Option, fit_class, hold
from queues.admission.never import never_fits
from queues.admission.plan import Admission, EstimatedStart, PendingStatus, Plan, Preemption
from queues.admission.reasons import PendingReason, ReasonCode, span_text
from queues.admission.snapshot import (
    NO_HISTORY,
    CapacityKind,
    Forecast,
    JobId,
    PreemptionClass,
    Snapshot,
)
from queues.admission.state import Alloc, PodSpot, Pool, State, place, pods_nodes


@dataclass(slots=True)
class Shadow:
    """The head-of-queue reservation of a blocked job on a class: from ``time`` to ``end`` it
    needs ``used`` devices of ``pool`` (per local node) and ``eq`` of the class aggregate.
    ``extra`` (per node of ``pool``) and ``eq_extra`` are what is left at ``time`` once it and
    every reservation running then have theirs: a later job that would still run at ``time`` may
    use only that."""

    job_id: JobId
    time: datetime
    end: datetime
    pool: Pool
    used: list[tuple[int, int]]
    eq: int
    extra: list[int]
    eq_extra: int


@dataclass(slots=True)
class QuotaShadow:
    """The same reservation on its team's quota of the class: from ``time`` to ``end`` it needs
    ``demand`` of the quota (within nominal when ``nominal``). A later job of the team that
    would still run at ``time`` may take only ``total_room`` more of the quota (and
    ``nominal_room`` more within nominal, when the reserved job needs nominal)."""

    job_id: JobId
    time: datetime
    end: datetime
    demand: int
    nominal: bool
    total_room: int
    nominal_room: int | None


@dataclass(slots=True)
class Outcome:
    """What the pass decided for one pending job that it did not admit."""

    ask: Ask
    reasons: list[PendingReason]
    backfill_blocked_by: JobId | None = None
    held_quota: bool = False  # blocked by its team's quota shadow, not a class's
    preempting: tuple[JobId, ...] = ()
    start: datetime | None = None
    would_admit: bool = False


@dataclass
class Pass:
    state: State
    dry_run: bool
    # head-of-queue reservations per class and per (team, class), in plan order
    shadows: dict[str, list[Shadow]] = field(default_factory=dict)
    quota_shadows: dict[tuple[str, str], list[QuotaShadow]] = field(default_factory=dict)
    reserved: int = 0  # reservations made so far in the pass
    walked: int = 0  # events the reservation walks visited (their cost)
    views: dict[tuple[Any, ...], tuple[list[int] | None, int]] = field(default_factory=dict)
    held: dict[tuple[Any, ...], tuple[JobId | None, bool]] = field(default_factory=dict)
    preempt: bool = True  # False in the forecast: it does not foresee preemptions
    explain: bool = True  # False in the forecast: it needs the decisions, not their reasons
    explain_only: AbstractSet[JobId] | None = None  # the jobs to explain (None: all)
    no_shadow: set[tuple[Any, ...]] = field(default_factory=set)
    fresh: set[JobId] = field(default_factory=set)
    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    no_fit: set[tuple[Any, ...]] = field(default_factory=set)
    no_preempt: set[tuple[Any, ...]] = field(default_factory=set)
    causes: dict[tuple[Any, ...], list[tuple[str, list[PendingReason]]]] = field(
        default_factory=dict
    )


def plan(
    snapshot: Snapshot,
    *,
    replay_budget: int | None = None,
    estimates: bool = True,
    explain: AbstractSet[JobId] | None = None,
) -> Plan:
    """Decide admissions and preemptions for ``snapshot`` and explain every job left pending.

    Deterministic: equal snapshots give equal plans. When the cluster is unreachable nothing is
    admitted or preempted, and every pending job's binding reason is ``ClusterUnreachable``.
    Every probe gets an estimated start in ``Plan.probe_estimates``; apart from that field the
    plan is the same as for the snapshot without probes. ``replay_budget`` bounds the forecast's
    replays (``REPLAY_BUDGET`` when not given; see ``forecast``). With ``estimates`` False the
    forecast is skipped (most of a plan's cost with thousands waiting): the decisions and
    reasons are the same, no waiting job or probe gets an estimated start (``NOT_ESTIMATED``
    says why), and a job with several classes lists its reasons in the classes' order. With
    ``explain`` given (and ``estimates`` False) only those jobs get a status in
    ``Plan.pending`` (``Plan.partial``): the same decisions, without the cost of explaining
    thousands of waiting jobs whose statuses are not needed.
    """
    if snapshot.node_pools:
        # nodes that are not there yet, shown to this same planner (queues/admission/elastic.py)
        return elastic_plan(
            snapshot, plan, replay_budget=replay_budget, estimates=estimates, explain=explain
        )
    state = State(snapshot)
    asks = build_asks(state)
    probes = build_probe_asks(state, asks)
    run = Pass(
        state=state,
        dry_run=snapshot.cluster_unreachable_since is not None,
        explain_only=None if estimates else explain,
    )
    probe_now: set[JobId] = set()
    next_probe = 0
    for ask in asks:
        # a probe is checked where it stands in plan order: after the real jobs ahead of it
        # took what they take, before any behind it does
        while next_probe < len(probes) and probes[next_probe].order <= ask.order:
            if _probe_fits_now(run, probes[next_probe]):
                probe_now.add(probes[next_probe].job.id)
            next_probe += 1
        _consider(run, ask)
    for probe in probes[next_probe:]:
        if _probe_fits_now(run, probe):
            probe_now.add(probe.job.id)
    waiting = [
        o.ask
        for o in run.outcomes
        if o.start is None and (not o.ask.static or o.ask.held_until is not None)
    ]
    if not estimates:
        later = EstimatedStart(at=None, why_unknown=NOT_ESTIMATED)
        return _assemble(run, {ask.job.id: later for ask in waiting})
    ghosts = [p for p in probes if p.job.id not in probe_now and not p.static]
    starts, probe_starts = forecast(
        state, waiting, ghosts, budget=REPLAY_BUDGET if replay_budget is None else replay_budget
    )
    probe_estimates = tuple(
        (probe.job.id, _probe_start(state, probe, probe_now, probe_starts))
        for probe in sorted(probes, key=lambda p: p.job.id)
    )
    return _assemble(run, starts, probe_estimates)


# ---------------------------------------------------------------------- the forecast

# Job checks one replay may spend (waiting jobs × passes) before the per-class simulation of
# ``estimate`` takes over the rest of the forecast: the replay is exact, the simulation fast.
# Four replays per plan: at 2,500 each, a plan over the benchmark's 4,000-GPU cluster takes about
# 1 s with 1,000 jobs waiting and 2 s with 10,000 (docs/benchmarks.md); what-ifs (``explain``)
# spend a fifth of it.
REPLAY_BUDGET = 2_500
WHAT_IF_REPLAY_BUDGET = 500
# Moments the shadow walks of a replay's pass visit (``_reserve``) that cost as much as one job
# check: a pass with many deep shadows over a big class spends the budget sooner.
WALKED_PER_CHECK = 20
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
    state: State, asks: Sequence[Ask], probes: Sequence[Ask], *, budget: int = REPLAY_BUDGET
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]:
    """The estimated start of every waiting ask and probe, after this plan's pass on ``state``
    (consumed).

    Four replays of the engine's own policy forward in time, from the state the pass left: at
    each moment something ends, opens or returns, the same pass (``_consider``: plan order,
    head-of-queue reservations, backfill, gangs) runs again on the jobs still waiting, without
    preemption and with nothing new arriving. They differ only in how long jobs run: their
    runtime limits, their predicted runtimes (``likely``), and their 10th and 90th percentiles
    (the interval ``range_low``–``range_high``); ``at`` is the latest of the four (see
    ``_combine``). With runtimes equal to the limits and nothing new arriving, each job starts
    when the first replay says: exactly ``at`` when no job has runtime history.
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
    for index, (name, pick) in enumerate(SCENARIOS):
        last = index == len(SCENARIOS) - 1
        copy = state if last else _copy_state(state)

        def ratio(job_id: JobId, pick: Scenario = pick) -> float:
            return pick(forecasts.get(job_id, NO_HISTORY))

        results[name] = _replay(copy, asks, probes, ratio, started, budget)
    state.now = snapshot.now
    latest, probe_latest = results["latest"]
    return (
        {ask.job.id: _combine(ask.job.id, latest, results) for ask in asks},
        {
            probe.job.id: _combine(probe.job.id, probe_latest, results, probes=True)
            for probe in probes
        },
    )


def _copy_state(state: State) -> State:
    """A fresh state with what ``state``'s pass did: its admissions held, its victims gone."""
    copy = State(state.snapshot)
    copy.ask_keys = state.ask_keys
    for job_id in [j for j in copy.allocs if j not in state.allocs]:
        copy.give_back(copy.allocs[job_id])
    for job_id, alloc in state.allocs.items():
        if job_id in copy.allocs:
            continue
        spots = [
            replace(spot, pool=copy.pools[(spot.pool.gpu_class, spot.pool.mode, spot.pool.profile)])
            for spot in alloc.spots
        ]
        copy.take(replace(alloc, spots=spots))
    return copy


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
    if bound.at is None:
        return bound
    found = {name: results[name][1 if probes else 0][job_id].at or bound.at for name in results}
    likely = found["likely"]
    low = min(found["low"], likely)
    high = max(found["high"], likely)
    return replace(bound, at=max(bound.at, high), likely=likely, range_low=low, range_high=high)


def _replay(
    state: State,
    asks: Sequence[Ask],
    probes: Sequence[Ask],
    ratio: Callable[[JobId], float],
    started: dict[JobId, tuple[datetime, timedelta]],
    budget: int,
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]:
    """One forecast replay (see ``forecast``); jobs run ``ratio`` of their limits."""
    now = state.now
    started = dict(started)  # and when the replay starts each job
    events: list[tuple[datetime, int, int, object]] = []
    sequence = 0

    def push(when: datetime, kind: int, payload: object) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (when, kind, sequence, payload))

    def finish(alloc: Alloc) -> datetime:
        # a job this plan admits starts now and runs to ``alloc.end`` at the latest
        since = started.get(alloc.job_id) or (now, alloc.end - now)
        return _finish(alloc, ratio(alloc.job_id), since, state.now)

    def runtime_of(ask: Ask) -> timedelta:
        return ask.runtime * ratio(ask.job.id)

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
        run = Pass(state=state, dry_run=False, preempt=False, explain=False)
        left: list[Ask] = []
        next_ghost = 0
        ghosts_left: list[Ask] = []
        for ask in waiting:
            while next_ghost < len(ghosts) and ghosts[next_ghost].order <= ask.order:
                _ghost_check(run, ghosts[next_ghost], probe_starts, ghosts_left)
                next_ghost += 1
            admitted = len(run.admissions)
            _consider(run, ask)
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
        waiting, ghosts = left, ghosts_left
    held = [e[3] for e in events if e[1] == _HELD_ENDS]
    rest = [*waiting, *(a for a in held if isinstance(a, Ask))]
    if rest or ghosts:
        # What the replay's budget did not reach: the per-class simulation from here on.
        more, more_probes = simulate(state, rest, ghosts, finish, runtime_of)
        starts.update(more)
        probe_starts.update(more_probes)
    return starts, probe_starts


_END, _RESERVATION, _NODE_BACK, _HELD_ENDS = 0, 1, 2, 3


def _ghost_check(
    run: Pass, ghost: Ask, found: dict[JobId, EstimatedStart], left: list[Ask]
) -> None:
    if _probe_fits_now(run, ghost):
        found[ghost.job.id] = EstimatedStart(at=run.state.now)
    else:
        left.append(ghost)


def _finish(
    alloc: Alloc, ratio: float, started: tuple[datetime, timedelta], now: datetime
) -> datetime:
    """When a job holding GPUs is predicted to end if it runs ``ratio`` of its limit; one that
    already ran longer than that is predicted to use the same share of the time it has left."""
    if ratio >= 1:
        return alloc.end
    return predicted_end(started=started, ratio=ratio, now=now, limit_end=alloc.end)


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


# ---------------------------------------------------------------------- the pass


def _versions(state: State, ask: Ask) -> int | tuple[int, ...]:
    """The versions of ``ask``'s classes, for cache keys (one class, the usual case: an int;
    asks of equal ``key`` have the same classes, so the two forms never meet)."""
    classes = ask.classes
    if len(classes) == 1:
        return state.class_version[classes[0]]
    return tuple(state.class_version[c] for c in classes)


def _consider(run: Pass, ask: Ask) -> None:
    state = run.state
    if ask.static:
        run.outcomes.append(Outcome(ask, list(ask.static)))
        return
    never = never_fits(state, ask)
    if never is not None:
        # Waiting is pointless, and the job must hold nothing back for itself (no shadow).
        run.outcomes.append(Outcome(ask, [never]))
        return
    user_cause = user_limit_cause(state, ask)
    if user_cause is None:
        fit = _fit_any(run, ask)
        if fit is not None:
            _admit(run, ask, fit)
            return
    explain = run.explain and (run.explain_only is None or ask.job.id in run.explain_only)
    # (a copy: a preemption notes its victims on the first reason)
    reasons = _class_reasons(run, ask) if explain else list(_blocked(run, ask))
    if user_cause is not None:
        run.outcomes.append(Outcome(ask, [user_cause, *reasons]))
        return
    outcome = Outcome(ask, reasons)
    if not reasons:
        # Every class would take it were it not for a reservation: a job ahead holds the
        # capacity. It gets its own reservation behind theirs.
        if explain:
            outcome.backfill_blocked_by, outcome.held_quota = _held_for(run, ask)
        _maybe_shadow(run, ask)
    elif not run.dry_run and run.preempt and _preempt(run, ask, outcome):
        pass
    else:
        _maybe_shadow(run, ask)
    run.outcomes.append(outcome)


def _held_for(run: Pass, ask: Ask) -> tuple[JobId | None, bool]:
    """The job ahead whose head-of-queue reservation keeps ``ask`` from starting, and whether
    it is held by its team's quota (True) or by the class's capacity (False): the first in plan
    order that alone leaves too little, else the first the job would overlap."""
    state = run.state
    key = ("held", ask.key, _versions(state, ask))
    cached = run.held.get(key)
    if cached is None:
        cached = run.held[key] = _find_holder(run, ask)
    return cached


def _find_holder(run: Pass, ask: Ask) -> tuple[JobId | None, bool]:
    state = run.state
    end = state.now + ask.runtime
    first: tuple[JobId | None, bool] = (None, False)
    for gpu_class in ask.classes:
        demand = ask.demand[gpu_class]
        for quota in run.quota_shadows.get((ask.job.team, gpu_class), ()):
            if end > quota.time:
                if demand > quota.total_room or (
                    quota.nominal_room is not None and demand > quota.nominal_room
                ):
                    return quota.job_id, True
                first = first if first[0] is not None else (quota.job_id, True)
        options = entitlement(state, ask, gpu_class)
        for shadow in run.shadows.get(gpu_class, ()):
            if end > shadow.time:
                if options and _fit_under(state, ask, gpu_class, options, [shadow]) is None:
                    return shadow.job_id, False
                first = first if first[0] is not None else (shadow.job_id, False)
    return first


def _probe_start(
    state: State, probe: Ask, started_now: set[JobId], simulated: dict[JobId, EstimatedStart]
) -> EstimatedStart:
    if probe.job.id in started_now:
        return EstimatedStart(at=state.snapshot.now)
    if probe.static:
        return EstimatedStart(at=None, why_unknown=probe.static[0].message)
    return simulated[probe.job.id]


def _probe_fits_now(run: Pass, ask: Ask) -> bool:
    """Whether a probe would be admitted now at its place in the pass; reads the state only
    (no hold, no cached verdict, no shadow), so real jobs see the same pass."""
    if ask.static or user_limit_cause(run.state, ask) is not None:
        return False
    return any(_fit(run, ask, c, entitlement(run.state, ask, c)) is not None for c in ask.classes)


def user_limit_cause(state: State, ask: Ask) -> PendingReason | None:
    """The queue's per-user limit, if it keeps this job waiting."""
    queue = ask.queue
    user = ask.job.user
    key = (queue.name, user)
    jobs = state.user_jobs.get(key, 0)
    if queue.max_running_jobs_per_user is not None and jobs >= queue.max_running_jobs_per_user:
        message = (
            f"user {user}: {jobs}/{queue.max_running_jobs_per_user} running jobs "
            f"in queue {queue.name}"
        )
        details = {
            "user": user,
            "queue": queue.name,
            "running_jobs": jobs,
            "max_running_jobs": queue.max_running_jobs_per_user,
        }
        return PendingReason(ReasonCode.USER_LIMIT, message, details, _user_hint(state, key))
    if queue.max_gpu_eq_per_user is not None:
        limit = state.eq_units(queue.max_gpu_eq_per_user)
        used = state.user_eq.get(key, 0)
        if used + ask.min_demand > limit:
            message = (
                f"user {user}: {eq_text(state, used)}/{eq_text(state, limit)} GPUs in use in queue "
                f"{queue.name} (needs {eq_text(state, ask.min_demand)})"
            )
            details = {
                "user": user,
                "queue": queue.name,
                "gpu_eq_in_use": eq_json(state, used),
                "max_gpu_eq": eq_json(state, limit),
                "requested": eq_json(state, ask.min_demand),
            }
            return PendingReason(ReasonCode.USER_LIMIT, message, details, _user_hint(state, key))
    return None


def _user_hint(state: State, key: tuple[str, str]) -> str:
    ends = sorted((a.end, a.job_id) for a in state.user_allocs.get(key, {}).values())
    if not ends:
        return ""
    end, job_id = ends[0]
    return f"your job {job_id} ends at the latest {time_text(end)}"


def _fit_any(run: Pass, ask: Ask) -> Fit | None:
    key = (ask.key, _versions(run.state, ask))
    if key in run.no_fit:
        return None
    for gpu_class in ask.classes:
        fit = _fit(run, ask, gpu_class, entitlement(run.state, ask, gpu_class))
        if fit is not None:
            return fit
    run.no_fit.add(key)
    return None


def _fit(
    run: Pass, ask: Ask, gpu_class: str, options: list[Option], reserved: bool = True
) -> Fit | None:
    """``fit_class`` under the head-of-queue reservations ahead (unless not ``reserved``): a job
    that would still run when one starts may use only what that one leaves."""
    state = run.state
    if not reserved:
        return fit_class(state, ask, gpu_class, options)
    options = _quota_guard(run, ask, gpu_class, options)
    if not options:
        return None
    end = state.now + ask.runtime
    shadows = [s for s in run.shadows.get(gpu_class, ()) if s.time < end]
    if not shadows:
        return fit_class(state, ask, gpu_class, options)
    # what the shadows leave is the same for every job they constrain alike: worked out once
    # per set of shadows and version of the class
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    key = (gpu_class, id(pool), state.class_version[gpu_class], *(s.job_id for s in shadows))
    left = run.views.get(key)
    if left is None:
        left = run.views[key] = _left_by(state, pool, shadows)
    return fit_class(state, ask, gpu_class, options, *left)


def _fit_under(
    state: State, ask: Ask, gpu_class: str, options: list[Option], shadows: list[Shadow]
) -> Fit | None:
    if not shadows:
        return fit_class(state, ask, gpu_class, options)
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    return fit_class(state, ask, gpu_class, options, *_left_by(state, pool, shadows))


def _left_by(
    state: State, pool: Pool | None, shadows: list[Shadow]
) -> tuple[list[int] | None, int]:
    """The free devices per node of ``pool`` (None: the pool's own) and the class's GPU-eq that
    a job running past every one of ``shadows`` may use."""
    view: list[int] | None = None
    for shadow in shadows:
        if shadow.pool is pool:
            if view is None:
                view = list(pool.free)
            for local, extra in enumerate(shadow.extra):
                if extra < view[local]:
                    view[local] = extra
    return view, min(s.eq_extra for s in shadows)


def _quota_guard(run: Pass, ask: Ask, gpu_class: str, options: list[Option]) -> list[Option]:
    """``options`` without the quota ones that would delay a reserved job of the team ahead
    (its ``QuotaShadow``): a job that ends before such a job starts may use any quota."""
    if all(option[0] is CapacityKind.RESERVED for option in options):
        return options
    end = run.state.now + ask.runtime
    quotas = [q for q in run.quota_shadows.get((ask.job.team, gpu_class), ()) if q.time < end]
    if not quotas:
        return options
    demand = ask.demand[gpu_class]
    total_room = min(q.total_room for q in quotas)
    nominal_rooms = [q.nominal_room for q in quotas if q.nominal_room is not None]
    kept = []
    for option in options:
        kind = option[0]
        if kind is not CapacityKind.RESERVED:
            if demand > total_room:
                continue
            if kind is CapacityKind.NOMINAL and nominal_rooms and demand > min(nominal_rooms):
                continue
        kept.append(option)
    return kept


def _admit(run: Pass, ask: Ask, fit: Fit, start: datetime | None = None) -> Alloc:
    state = run.state
    alloc = hold(state, ask, fit, start or state.now)
    if fit.kind is not CapacityKind.RESERVED:
        for quota in run.quota_shadows.get((ask.job.team, fit.gpu_class), ()):
            if alloc.end > quota.time and alloc.job_id != quota.job_id:
                quota.total_room -= alloc.eq
                if fit.kind is CapacityKind.NOMINAL and quota.nominal_room is not None:
                    quota.nominal_room -= alloc.eq
    run.fresh.add(ask.job.id)
    borrowed = 0
    if fit.kind is CapacityKind.BORROWED:
        # what the job adds to the team's use beyond nominal; the rest fills nominal room
        borrowed = min(alloc.eq, state.borrowing((ask.job.team, fit.gpu_class)))
    shadows = run.shadows.get(fit.gpu_class, ())
    for shadow in shadows:
        if alloc.end > shadow.time:
            shadow.eq_extra -= alloc.eq
            if shadow.pool is fit.pool:
                for spot in alloc.spots:
                    shadow.extra[spot.local] -= spot.devices
    if start is None:
        if run.dry_run:
            run.outcomes.append(Outcome(ask, [], start=state.now, would_admit=True))
        else:
            run.admissions.append(
                Admission(
                    job_id=ask.job.id,
                    gpu_class=fit.gpu_class,
                    nodes=pods_nodes(state, alloc.spots),
                    gpu_eq=Fraction(alloc.eq, state.scale),
                    capacity=fit.kind,
                    reservation_id=fit.reservation_id,
                    backfilled=bool(shadows),
                    borrowed_gpu_eq=Fraction(borrowed, state.scale),
                )
            )
    return alloc


def _class_reasons(run: Pass, ask: Ask) -> list[PendingReason]:
    """All causes over the job's classes, the class with the fewest causes first (removing its
    causes admits the job soonest), ties broken by cost order."""
    key = (ask.key, _versions(run.state, ask))
    per_class = run.causes.get(key)
    if per_class is None:
        per_class = [(c, class_causes(run.state, ask, c)) for c in ask.classes]
        run.causes[key] = per_class
    if any(not causes for _, causes in per_class):
        return []
    # A class the team holds no quota, borrowing or reservation for only adds noise, unless
    # no class is open to it at all.
    open_to_team = [item for item in per_class if _open_to(run.state, ask, item[0])]
    per_class = open_to_team or per_class[:1]
    ordered = sorted(enumerate(per_class), key=lambda item: (len(item[1][1]), item[0]))
    reasons: list[PendingReason] = []
    seen: set[tuple[str, str]] = set()
    for _, (_, causes) in ordered:
        for cause in causes:
            mark = (cause.code.value, cause.message)
            if mark not in seen:
                seen.add(mark)
                reasons.append(cause)
    return reasons


_SHADOWED = [PendingReason(ReasonCode.PRIORITY, "", {}, "")]


def _blocked(run: Pass, ask: Ask) -> list[PendingReason]:
    """What ``_class_reasons`` would say, as far as the pass's decisions go: nothing when a class
    would take the job were it not for a head-of-queue reservation, a placeholder otherwise."""
    key = ("blocked", ask.key, _versions(run.state, ask))
    cached = run.causes.get(key)
    if cached is None:
        state = run.state
        fits = any(
            fit_class(state, ask, c, options) is not None
            for c in ask.classes
            if (options := entitlement(state, ask, c))
        )
        cached = [] if fits else [("", _SHADOWED)]
        run.causes[key] = cached
    return [] if not cached else _SHADOWED


def _open_to(state: State, ask: Ask, gpu_class: str) -> bool:
    if state.holder_reservations(ask.job.team, ask.queue.name, gpu_class):
        return True
    if ask.queue.reservation_only:
        return False
    key = (ask.job.team, gpu_class)
    limit = state.borrow_limit.get(key, 0) if ask.queue.can_borrow else 0
    return state.nominal.get(key, 0) + limit > 0


# ---------------------------------------------------------------------- preemption


def _preempt(run: Pass, ask: Ask, outcome: Outcome) -> bool:
    """Free capacity for ``ask`` by preempting the fewest jobs that lose the least work.

    Only entitled demand preempts: a reservation holder within its reservation, or a team within
    its nominal quota. Victims are jobs of graceful/preemptible queues that are borrowed (any
    team: lenders reclaim, while that team uses more than its nominal quota, see
    ``_reclaimable``) or belong to the same team with lower priority. Never in a class where
    a job ahead waits on an EASY shadow, or on the team's quota shadow: that job counts on
    those jobs' capacity.
    """
    state = run.state
    key = (ask.key, _versions(state, ask))
    if key in run.no_preempt:
        return False
    if _waits_for_stopping(state, ask):
        run.no_preempt.add(key)
        return False
    for gpu_class in ask.classes:
        held = (ask.job.team, gpu_class)
        if run.shadows.get(gpu_class) or run.quota_shadows.get(held):
            continue
        options = [
            o for o in entitlement(state, ask, gpu_class) if o[0] is not CapacityKind.BORROWED
        ]
        if not options:
            continue
        candidates = sorted(
            (
                a
                for a in state.class_allocs[gpu_class].values()
                if a.preemptible
                and a.job_id not in run.fresh
                and (
                    a.kind is CapacityKind.BORROWED
                    or (a.team == ask.job.team and a.rank < ask.rank)
                )
            ),
            key=lambda a: (a.lost_work, a.rank, -a.eq, a.job_id),
        )
        if not candidates:
            continue
        for option in options:
            victims = _choose_victims(run, ask, gpu_class, option, candidates)
            if victims is None:
                continue
            fit = _fit(run, ask, gpu_class, [option], reserved=False)
            assert fit is not None
            grace = max((v.grace for v in victims), default=timedelta(0))
            start = state.now + grace
            _hold_until_stopped(state, victims, _admit(run, ask, fit, start=start))
            for victim in victims:
                run.preemptions.append(
                    Preemption(
                        job_id=victim.job_id,
                        reason=_preemption_reason(state, ask, victim, option),
                        grace_period=victim.grace,
                        for_job=ask.job.id,
                        lost_work=victim.lost_work,
                    )
                )
            outcome.preempting = tuple(v.job_id for v in victims)
            outcome.start = start
            names = ", ".join(str(v.job_id) for v in victims)
            note = (
                f"preempting job{'s' if len(victims) > 1 else ''} {names} "
                f"(grace {span_text(grace)}); "
                f"starts by {time_text(start)}"
            )
            first = outcome.reasons[0]
            outcome.reasons[0] = PendingReason(first.code, first.message, first.details, note)
            return True
    run.no_preempt.add(key)
    return False


def _waits_for_stopping(state: State, ask: Ask) -> bool:
    """Whether ``ask`` would fit one of its classes, under an entitlement that may preempt, once
    the pods already stopping there are gone (jobs stopped in an earlier cycle, or preempted
    earlier in this pass): it then waits for them, at most their grace period, rather than
    preempting more work for GPUs about to be free."""
    for gpu_class in ask.classes:
        stopping = [a for a in state.class_allocs[gpu_class].values() if a.stopping]
        if not stopping:
            continue
        options = [
            o for o in entitlement(state, ask, gpu_class) if o[0] is not CapacityKind.BORROWED
        ]
        if not options:
            continue
        for alloc in stopping:
            state.give_back(alloc)
        fits = fit_class(state, ask, gpu_class, options) is not None
        for alloc in stopping:
            state.take(alloc)
        if fits:
            return True
    return False


def _hold_until_stopped(state: State, victims: list[Alloc], preemptor: Alloc) -> None:
    """A preempted job's pods keep its GPUs until they are gone, at the end of its grace period.
    Its preemptor holds its part of them from now on (it starts when the last victim is gone);
    the rest stays held by the victim's stopping pods until then, so no job admitted in this
    pass lands on GPUs that are not free yet. That remainder counts against nothing but
    capacity: the victim's quota, reservation and user limits are free from now on, as before."""
    reused: dict[tuple[int, int], list[int]] = {}  # (pool, local node) → [devices, HBM GB]
    for spot in preemptor.spots:
        entry = reused.setdefault((id(spot.pool), spot.local), [0, 0])
        entry[0] += spot.devices
        entry[1] += spot.hbm
    for victim in victims:
        spots: list[PodSpot] = []
        for spot in victim.spots:
            entry = reused.get((id(spot.pool), spot.local), [0, 0])
            devices, hbm = min(spot.devices, entry[0]), min(spot.hbm, entry[1])
            entry[0] -= devices
            entry[1] -= hbm
            left = spot.devices - devices
            if left > 0 or spot.hbm > hbm:
                unit = spot.pool.unit[spot.local]
                spots.append(PodSpot(spot.pool, spot.local, left, spot.hbm - hbm, left * unit))
        if not spots:
            continue
        state.take(
            Alloc(
                job_id=-victim.job_id,  # apart from the job itself, which went back to pending
                team="",
                queue="",
                user="",
                gpu_class=victim.gpu_class,
                kind=victim.kind,
                reservation_id=None,
                spots=spots,
                eq=sum(spot.eq for spot in spots),
                end=state.now + victim.grace,
                rank=victim.rank,
                preemptible=False,
                grace=victim.grace,
                lost_work=timedelta(0),
                stopping=True,
                counts=False,
            )
        )


def _choose_victims(
    run: Pass, ask: Ask, gpu_class: str, option: Option, candidates: list[Alloc]
) -> list[Alloc] | None:
    """Greedy by least lost work until the job fits, then drop every victim it fits without.
    Leaves the state with the victims removed, or unchanged when preemption cannot help."""
    state = run.state
    chosen: list[Alloc] = []
    fits = False
    for alloc in candidates:
        if not _reclaimable(state, ask, alloc, option):
            continue
        state.give_back(alloc)
        chosen.append(alloc)
        if _fit(run, ask, gpu_class, [option], reserved=False) is not None:
            fits = True
            break
    if not fits:
        for alloc in reversed(chosen):
            state.take(alloc)
        return None
    for alloc in sorted(chosen, key=lambda a: (-a.lost_work.total_seconds(), a.job_id)):
        state.take(alloc)
        if _fit(run, ask, gpu_class, [option], reserved=False) is None:
            state.give_back(alloc)
    victims = [a for a in chosen if not a.live]
    return sorted(victims, key=lambda a: a.job_id)


def _reclaimable(state: State, ask: Ask, alloc: Alloc, option: Option) -> bool:
    """Whether candidate ``alloc`` may be preempted for ``ask`` now (victims already chosen are
    given back, so this follows them).

    The team's own lower-priority work always may. A borrowed job (reclaimed as a whole: a
    running job cannot shrink) may be reclaimed by a reservation holder, whose idle GPUs any
    borrowed work may sit on, and by a team reclaiming its nominal quota only while the job's
    team still borrows, i.e. uses more than its own nominal quota. A borrowed job fills its
    team's nominal room first, so once the victims taken from a team cover what it borrows,
    its other borrowed jobs run within its guarantee and are not taken for a lender.
    """
    if alloc.team == ask.job.team and alloc.rank < ask.rank:
        return True
    if option[0] is CapacityKind.RESERVED:
        return True
    return state.borrowing((alloc.team, alloc.gpu_class)) > 0


def _preemption_reason(state: State, ask: Ask, victim: Alloc, option: Option) -> str:
    kind, rid, _ = option
    if kind is CapacityKind.RESERVED:
        label = state.reservations[rid].label if rid is not None else "a reservation"
        why = f"{label} of team {ask.job.team} reclaims its {victim.gpu_class} GPUs"
    elif victim.kind is CapacityKind.BORROWED:
        why = f"team {ask.job.team} reclaims its nominal {victim.gpu_class} quota"
    else:
        why = f"higher-priority job {ask.job.id} of team {ask.job.team} needs the GPUs"
    lost = _duration(victim.lost_work)
    return f"{why} for job {ask.job.id} (queue {ask.queue.name}); lost work {lost}"


def _duration(value: timedelta) -> str:
    minutes = int(value.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


# ---------------------------------------------------------------------- conservative backfill

# Head-of-queue reservations one pass makes at most per class: the first blocked jobs in plan
# order get one each; jobs behind them start wherever they fit without delaying any of those.
RESERVATION_DEPTH = 32


def _maybe_shadow(run: Pass, ask: Ask) -> None:
    """Give a blocked job its head-of-queue reservation on the first class (cost order) where
    one can be found with what runs now and the reservations ahead of it, whatever blocks it:
    capacity or its team's quota."""
    state = run.state
    # Whether a reservation can be found depends on what is held and what is reserved: a job
    # like one that found none finds none until either changes.
    tried = (ask.key, state.changes, run.reserved)
    if tried in run.no_shadow:
        return
    run.no_shadow.add(tried)
    for gpu_class in ask.classes:
        pool = state.pools.get((gpu_class, ask.mode, ask.profile))
        if pool is None or len(run.shadows.get(gpu_class, ())) >= RESERVATION_DEPTH:
            continue
        options = entitlement(state, ask, gpu_class)
        if options:
            option = options[0]
        elif ask.queue.reservation_only or not _open_to(state, ask, gpu_class):
            continue
        else:
            kind = CapacityKind.BORROWED if ask.queue.can_borrow else CapacityKind.NOMINAL
            lend = ask.queue.can_borrow and ask.queue.preemption is PreemptionClass.PREEMPTIBLE
            option = (kind, None, lend)
        if _reserve(run, ask, gpu_class, pool, option):
            run.reserved += 1
            state.class_version[gpu_class] += 1
            return


@dataclass(slots=True)
class _QuotaWalk:
    """The team's quota use of one class over time, for a reservation."""

    team: str
    demand: int
    nominal: int
    cap: int
    needs_nominal: bool
    held: int
    total: int

    @classmethod
    def start(cls, state: State, ask: Ask, gpu_class: str) -> _QuotaWalk:
        key = (ask.job.team, gpu_class)
        nominal = state.nominal.get(key, 0)
        held = state.nominal_jobs_eq.get(key, 0)
        return cls(
            team=ask.job.team,
            demand=ask.demand[gpu_class],
            nominal=nominal,
            cap=nominal + state.borrow_limit.get(key, 0),
            needs_nominal=not ask.queue.can_borrow,
            held=held,
            total=held + state.borrowed_jobs_eq.get(key, 0),
        )

    def ended(self, alloc: Alloc) -> None:
        if alloc.team != self.team or alloc.kind is CapacityKind.RESERVED:
            return
        self.total -= alloc.eq
        if alloc.kind is CapacityKind.NOMINAL:
            self.held -= alloc.eq

    def add(self, quota: QuotaShadow, sign: int) -> None:
        self.total += sign * quota.demand
        if quota.nominal:
            self.held += sign * quota.demand

    def fits(self, more: int = 0, more_nominal: int = 0) -> bool:
        """The same rule as ``entitlement`` (nominal within nominal, everything within the cap),
        with ``more`` (``more_nominal`` within nominal) reserved by others meanwhile."""
        if self.total + more + self.demand > self.cap:
            return False
        return not self.needs_nominal or self.held + more_nominal + self.demand <= self.nominal


def _class_ends(state: State, gpu_class: str) -> list[tuple[datetime, Alloc, int]]:
    """The class's jobs by end time with the GPU-eq each holds on eligible nodes, kept for as
    long as the class does not change (every reservation of a pass walks it)."""
    key = ("ends", gpu_class, state.changes)
    cached = state.memo.get(key)
    if cached is None:
        cached = [
            (a.end, a, sum(s.eq for s in a.spots if s.pool.eligible[s.local]))
            for a in sorted(state.class_allocs[gpu_class].values(), key=lambda a: (a.end, a.job_id))
        ]
        state.memo[key] = cached
    assert isinstance(cached, list)
    return cached


_ENDS, _RESERVED_ENDS, _RESERVED_STARTS = 0, 1, 2
_Event = tuple[datetime, int, Any]


def _event_order(event: _Event) -> tuple[datetime, int]:
    return event[0], event[1]


@dataclass(slots=True)
class _Room:
    """What one reservation walk sees at a moment: the class's usable GPU-eq, the free devices
    per node of the job's pool, and its team's quota use (None for a reservation's capacity)."""

    pool: Pool
    rid: int | None
    usable: int
    free: list[int]
    quota: _QuotaWalk | None

    def apply(self, event: _Event) -> bool:
        """Apply one event; True if it frees something."""
        _, what, item = event
        if what == _ENDS:
            alloc, eligible_eq = item
            if not (alloc.kind is CapacityKind.RESERVED and alloc.reservation_id != self.rid):
                self.usable += eligible_eq
            for spot in alloc.spots:
                if spot.pool is self.pool:
                    self.free[spot.local] += spot.devices
            if self.quota is not None:
                self.quota.ended(alloc)
            return True
        sign = 1 if what == _RESERVED_ENDS else -1
        if isinstance(item, Shadow):
            self.usable += sign * item.eq
            if item.pool is self.pool:
                for local, devices in item.used:
                    self.free[local] += sign * devices
        elif self.quota is not None:
            self.quota.add(item, -sign)
        return sign > 0

    def fits(self, demand: int) -> bool:
        return demand <= self.usable and (self.quota is None or self.quota.fits())

    def at_starts(self, events: list[_Event]) -> list[_AtStart]:
        """The room at each time a shadow starts (from a copy of this one, walking ``events``):
        the usable GPU-eq, the team's quota use, and the free devices of the nodes that shadow
        takes. Between two such times room only grows, so the least room over any span is the
        room at its start or at one of these."""
        walk = None if self.quota is None else replace(self.quota)
        room = _Room(self.pool, self.rid, self.usable, list(self.free), walk)
        found: list[_AtStart] = []
        last = max((e[0] for e in events if e[1] == _RESERVED_STARTS), default=None)
        index = 0
        while last is not None and index < len(events) and events[index][0] <= last:
            when = events[index][0]
            touched: list[int] = []
            starts = False
            while index < len(events) and events[index][0] == when:
                event = events[index]
                room.apply(event)
                if event[1] == _RESERVED_STARTS:
                    starts = True
                    if isinstance(event[2], Shadow) and event[2].pool is self.pool:
                        touched.extend(local for local, _ in event[2].used)
                index += 1
            if starts:
                nodes = {local: room.free[local] for local in touched}
                total, held = (walk.total, walk.held) if walk is not None else (0, 0)
                found.append(_AtStart(when, room.usable, total, held, nodes))
        return found


@dataclass(slots=True)
class _AtStart:
    time: datetime
    usable: int
    total: int
    held: int
    free: dict[int, int]


def _class_end_events(state: State, gpu_class: str) -> list[_Event]:
    key = ("end events", gpu_class, state.changes)
    cached = state.memo.get(key)
    if cached is None:
        cached = [(end, _ENDS, (alloc, eq)) for end, alloc, eq in _class_ends(state, gpu_class)]
        state.memo[key] = cached
    assert isinstance(cached, list)
    return cached


def _reserve(run: Pass, ask: Ask, gpu_class: str, pool: Pool, option: Option) -> bool:
    """Reserve for ``ask`` the earliest time from which it fits ``gpu_class`` for its whole
    runtime (limit), given that running jobs end at their limits and the reservations already
    made keep theirs (and, unless the option is a reservation's, its team's quota would take
    it); False if there is none with what runs now.

    The walk visits the times something ends or a reservation ends; from each, the job must fit
    the least room until it would end (the room shrinks only where a reservation starts)."""
    state = run.state
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    kind, rid, lend = option
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    quota = None if kind is CapacityKind.RESERVED else _QuotaWalk.start(state, ask, gpu_class)
    room = _Room(pool, rid, state.usable(gpu_class, kind, rid, lend, own), list(pool.free), quota)
    shadows = run.shadows.setdefault(gpu_class, [])
    quotas = run.quota_shadows.get((ask.job.team, gpu_class), []) if quota else []
    reservations: list[Shadow | QuotaShadow] = [*shadows, *quotas]
    held: list[_Event] = []
    for reserved in reservations:
        held.append((reserved.time, _RESERVED_STARTS, reserved))
        held.append((reserved.end, _RESERVED_ENDS, reserved))
    held.sort(key=_event_order)
    events = list(_class_end_events(state, gpu_class))
    for event in held:  # few: into the cached list of ends, where they belong
        bisect.insort(events, event, key=_event_order)
    at_starts = room.at_starts(events) if held else []
    start_times = [a.time for a in at_starts]
    index = 0
    while index < len(events):
        when = events[index][0]
        released = False
        while index < len(events) and events[index][0] == when:
            released = room.apply(events[index]) or released
            index += 1
        run.walked += 1
        if not released or not room.fits(demand):
            continue
        end = when + ask.runtime
        window = at_starts[
            bisect.bisect_right(start_times, when) : bisect.bisect_left(start_times, end)
        ]
        free = room.free
        if window:
            if demand > min(a.usable for a in window):
                continue
            if quota is not None:
                more = max(a.total for a in window) - quota.total
                more_nominal = max(a.held for a in window) - quota.held
                if not quota.fits(max(more, 0), max(more_nominal, 0)):
                    continue
            free = list(free)
            for at in window:
                for local, value in at.free.items():
                    if value < free[local]:
                        free[local] = value
        placement = place(pool, shape, free)
        if placement is None:
            continue
        used = [(local, pods * shape.devices) for local, pods in placement]
        extra = list(room.free)
        for local, devices in used:
            extra[local] -= devices
        for shadow in shadows:
            if when <= shadow.time < end:
                shadow.eq_extra -= demand
                if shadow.pool is pool:
                    for local, devices in used:
                        shadow.extra[local] -= devices
        shadows.append(
            Shadow(ask.job.id, when, end, pool, used, demand, extra, room.usable - demand)
        )
        if quota is not None:
            for reserved in quotas:
                if when <= reserved.time < end:
                    reserved.total_room -= demand
                    if quota.needs_nominal and reserved.nominal_room is not None:
                        reserved.nominal_room -= demand
            nominal_room = quota.nominal - quota.held - demand if quota.needs_nominal else None
            run.quota_shadows.setdefault((ask.job.team, gpu_class), []).append(
                QuotaShadow(
                    ask.job.id,
                    when,
                    end,
                    demand,
                    quota.needs_nominal,
                    quota.cap - quota.total - demand,
                    nominal_room,
                )
            )
        return True
    return False


# ---------------------------------------------------------------------- assembling


def _assemble(
    run: Pass,
    starts: dict[JobId, EstimatedStart],
    probe_estimates: tuple[tuple[JobId, EstimatedStart], ...] = (),
) -> Plan:
    state = run.state
    snapshot = state.snapshot
    waiting: dict[str, list[JobId]] = {}
    for outcome in run.outcomes:
        if outcome.would_admit:
            continue  # dry run: admitted once the cluster answers
        waiting.setdefault(outcome.ask.queue.name, []).append(outcome.ask.job.id)
    positions: dict[JobId, int] = {}
    for jobs in waiting.values():
        for position, job_id in enumerate(jobs, start=1):
            positions[job_id] = position
    unreachable = _unreachable_reason(snapshot)
    statuses: list[PendingStatus] = []
    only = run.explain_only
    for outcome in run.outcomes:
        ask = outcome.ask
        job_id = ask.job.id
        if only is not None and job_id not in only:
            continue
        queue_jobs = waiting.get(ask.queue.name, [])
        position = positions.get(job_id, 1)
        never = bool(outcome.reasons) and outcome.reasons[0].code is ReasonCode.NEVER_FITS
        if outcome.start is not None:
            estimate = EstimatedStart(at=outcome.start)
        elif ask.static and ask.held_until is None:
            estimate = EstimatedStart(at=None, why_unknown=ask.static[0].message)
        elif never:
            estimate = EstimatedStart(at=None, why_unknown=outcome.reasons[0].message)
        else:
            estimate = starts[job_id]
        reasons = _binding_class_first(list(outcome.reasons), estimate.gpu_class)
        priority = _priority_reason(state, ask, position, len(queue_jobs), outcome, estimate)
        if outcome.would_admit:
            pass
        elif outcome.backfill_blocked_by is not None or not reasons:
            reasons.insert(0, priority)
        elif position > 1:
            reasons.append(priority)
        if unreachable is not None:
            reasons.insert(0, unreachable)
        statuses.append(
            PendingStatus(
                job_id=job_id,
                reasons=tuple(reasons),
                estimated_start=estimate,
                position=position,
                queue_length=len(queue_jobs),
                preempting=outcome.preempting,
            )
        )
    admitted = tuple(
        (job.id, (_unschedulable_reason(job.unschedulable),))
        for job in sorted(snapshot.running, key=lambda j: j.id)
        if job.started_at is None and job.unschedulable
    )
    return Plan(
        now=snapshot.now,
        admissions=tuple(run.admissions),
        preemptions=tuple(sorted(run.preemptions, key=lambda p: p.job_id)),
        pending=tuple(statuses),
        admitted_reasons=admitted,
        probe_estimates=probe_estimates,
        partial=only is not None,
    )


def _binding_class_first(
    reasons: list[PendingReason], gpu_class: str | None
) -> list[PendingReason]:
    """The reasons about the class the job would start on first (the simulation says which
    frees first), keeping their order; a reason about another class never comes first."""
    if gpu_class is None:
        return reasons
    return sorted(
        reasons,
        key=lambda r: r.details.get("gpu_class") not in (None, gpu_class),
    )


def _priority_reason(
    state: State, ask: Ask, position: int, length: int, outcome: Outcome, estimate: EstimatedStart
) -> PendingReason:
    message = f"position {position} of {length} in queue {ask.queue.name}"
    details: dict[str, Any] = {
        "queue": ask.queue.name,
        "position": position,
        "queue_length": length,
    }
    if outcome.backfill_blocked_by is not None:
        held = "its team's free quota is" if outcome.held_quota else "the free GPUs are"
        message += (
            f"; {held} held for job {outcome.backfill_blocked_by} ahead of it, "
            "which starting this job would delay"
        )
        details["held_for_job"] = outcome.backfill_blocked_by
    hint = ""
    if estimate.at is not None:
        hint = f"estimated start {time_text(estimate.at)}"
    return PendingReason(ReasonCode.PRIORITY, message, details, hint)


def _unreachable_reason(snapshot: Snapshot) -> PendingReason | None:
    since = snapshot.cluster_unreachable_since
    if since is None:
        return None
    message = f"the portal cannot reach the cluster since {time_text(since)}"
    details = {"since": since.isoformat()}
    return PendingReason(
        ReasonCode.CLUSTER_UNREACHABLE,
        message,
        details,
        "nothing to do: admission resumes when the cluster answers",
    )


def _unschedulable_reason(message: str) -> PendingReason:
    return PendingReason(
        ReasonCode.CLUSTER_UNSCHEDULABLE,
        f"admitted, but the cluster's scheduler cannot place a pod: {message}",
        {"scheduler_message": message},
        "",
    )
