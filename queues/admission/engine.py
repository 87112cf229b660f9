"""The planner's entry point: ``plan(snapshot)``, one pass over pending jobs in order, then the
forecast for estimates, assembled into a ``Plan``.

Cut the way Kueue cuts its scheduler, one module per part:

* ``scheduler`` — the pass: jobs in plan order (see ``asks.build_asks``), each tried on its GPU
  classes cheapest first and admitted where it fits now (``consider``);
* ``preemption`` — otherwise, which running jobs to stop for it (only jobs of
  ``graceful``/``preemptible`` queues: borrowed work reclaimed by reservation holders and by
  lenders while its team borrows, or the team's own lower-priority work);
* ``backfill`` — otherwise, its shadow, a reservation of its start (conservative backfill): the
  earliest time it fits for its whole runtime on the class's capacity and its team's quota,
  behind the shadows ahead of it. A later job may start only where it delays none of them;
* ``forecast`` — every waiting job's estimated start, by replaying the pass forward in time;
* ``pass_state`` — what one pass carries (``Pass``, the shadows, the outcomes) and ``admit``.

Probes (``Snapshot.probes``, hypothetical jobs) are checked at their place in plan order with the
same rules, read-only: one that would fit then is estimated to start now; the others ride along in
the forward simulation as ghosts (see ``estimate``). They never take capacity, preempt, or set a
shadow, so the plan for real jobs is the same with or without them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from queues.admission.asks import Ask, build_asks, build_probe_asks
from queues.admission.diagnose import time_text
from queues.admission.elastic import elastic_plan
from queues.admission.forecast import NOT_ESTIMATED, REPLAY_BUDGET, WALKED_PER_CHECK, forecast
from queues.admission.pass_state import Outcome, Pass, kept_from
from queues.admission.plan import EstimatedStart, PendingStatus, Plan
from queues.admission.projection import FORECAST_HORIZON
from queues.admission.reasons import PendingReason, ReasonCode, TimeTexts
from queues.admission.scheduler import consider, probe_fits_now
from queues.admission.snapshot import (
    JobId,
    Snapshot,
)
from queues.admission.state import State


def plan(
    snapshot: Snapshot,
    *,
    replay_budget: int | None = None,
    estimates: bool = True,
    explain: AbstractSet[JobId] | None = None,
    horizon: int | None = FORECAST_HORIZON,
) -> Plan:
    """Decide admissions and preemptions for ``snapshot`` and explain every job left pending.

    Deterministic: equal snapshots give equal plans. When the cluster is unreachable nothing is
    admitted or preempted, and every pending job's binding reason is ``ClusterUnreachable``.
    Every probe gets an estimated start in ``Plan.probe_estimates``; apart from that field the
    plan is the same as for the snapshot without probes. ``replay_budget`` bounds the forecast's
    replays (``REPLAY_BUDGET`` when not given; see ``forecast``), ``horizon`` how many starts
    they simulate before projecting the rest (None: every one). With ``estimates`` False the
    forecast is skipped (most of a plan's cost with thousands waiting): the decisions and
    reasons are the same, no waiting job or probe gets an estimated start (``NOT_ESTIMATED``
    says why), and a job with several classes lists its reasons in the classes' order. With
    ``explain`` given (and ``estimates`` False) only those jobs get a status in
    ``Plan.pending`` (``Plan.partial``): the same decisions, without the cost of explaining
    thousands of waiting jobs whose statuses are not needed.
    """
    with _cycles_collected_after():
        return _plan(snapshot, replay_budget, estimates, explain, horizon)


@contextmanager
def _cycles_collected_after() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a plan (and resumed as it was): a plan
    allocates hundreds of thousands of short-lived objects (asks, allocations, events,
    estimates), which reference counting frees; each collection the allocations would trigger
    midway walks the whole snapshot and everything the plan built, and so costs more the longer
    the queue. Measured on the benchmark's cluster: at 10,000 waiting a plan spent a fifth of
    its time in them, and the forecast, which allocates most, the larger share
    (docs/benchmarks.md). What cycles a plan leaves are collected after it, as usual."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _plan(
    snapshot: Snapshot,
    replay_budget: int | None,
    estimates: bool,
    explain: AbstractSet[JobId] | None,
    horizon: int | None,
) -> Plan:
    if snapshot.node_pools:
        # nodes that are not there yet, shown to this same planner (queues/admission/elastic.py)
        return elastic_plan(
            snapshot,
            plan,
            replay_budget=replay_budget,
            estimates=estimates,
            explain=explain,
            horizon=horizon,
        )
    state = State(snapshot)
    asks = build_asks(state)
    probes = build_probe_asks(state, asks)
    run = Pass(
        state=state,
        dry_run=snapshot.cluster_unreachable_since is not None,
        explain_only=None if estimates else explain,
        kept=kept_from(state, asks),
    )
    probe_now: set[JobId] = set()
    next_probe = 0
    for ask in asks:
        # a probe is checked where it stands in plan order: after the real jobs ahead of it
        # took what they take, before any behind it does
        while next_probe < len(probes) and probes[next_probe].order <= ask.order:
            if probe_fits_now(run, probes[next_probe]):
                probe_now.add(probes[next_probe].job.id)
            next_probe += 1
        consider(run, ask)
    for probe in probes[next_probe:]:
        if probe_fits_now(run, probe):
            probe_now.add(probe.job.id)
    # what the forecast estimates: neither a job that can never start (its reason says why)
    # nor one no class takes in this plan (unless held back until a time)
    waiting = [
        o.ask
        for o in run.outcomes
        if o.start is None
        and (not o.ask.static or o.ask.held_until is not None)
        and not (o.reasons and o.reasons[0].code is ReasonCode.NEVER_FITS)
    ]
    if not estimates:
        later = EstimatedStart(at=None, why_unknown=NOT_ESTIMATED)
        return _assemble(run, {ask.job.id: later for ask in waiting})
    ghosts = [p for p in probes if p.job.id not in probe_now and not p.static]
    landing: dict[JobId, tuple[datetime, tuple[str, ...]]] = {}
    starts, probe_starts = forecast(
        state,
        waiting,
        ghosts,
        budget=REPLAY_BUDGET if replay_budget is None else replay_budget,
        kept=run.reserved_nodes(),
        horizon=horizon,
        walked=run.walked // WALKED_PER_CHECK,
        landing=landing if state.coming_nodes else None,
    )
    probe_estimates = tuple(
        (probe.job.id, _probe_start(state, probe, probe_now, probe_starts))
        for probe in sorted(probes, key=lambda p: p.job.id)
    )
    landings = tuple((job_id, *landing[job_id]) for job_id in sorted(landing))
    return _assemble(run, starts, probe_estimates, landings)


def _probe_start(
    state: State, probe: Ask, started_now: set[JobId], simulated: dict[JobId, EstimatedStart]
) -> EstimatedStart:
    if probe.job.id in started_now:
        return EstimatedStart(at=state.snapshot.now)
    if probe.static:
        return EstimatedStart(at=None, why_unknown=probe.static[0].message)
    return simulated[probe.job.id]


# ---------------------------------------------------------------------- assembling


def _assemble(
    run: Pass,
    starts: dict[JobId, EstimatedStart],
    probe_estimates: tuple[tuple[JobId, EstimatedStart], ...] = (),
    landings: tuple[tuple[JobId, datetime, tuple[str, ...]], ...] = (),
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
    times = TimeTexts(snapshot.now)
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
        priority = _priority_reason(ask, position, len(queue_jobs), outcome, estimate, times)
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
        planned_nodes=run.planned_nodes(),
        landings=landings,
    )


def _binding_class_first(
    reasons: list[PendingReason], gpu_class: str | None
) -> list[PendingReason]:
    """The reasons about the class the job would start on first (the simulation says which
    frees first), keeping their order; a reason about another class never comes first."""
    if gpu_class is None or len(reasons) < 2:
        return reasons
    first: list[PendingReason] = []
    later: list[PendingReason] = []
    for reason in reasons:  # (one pass: a plan reorders tens of thousands)
        about = reason.details.get("gpu_class")
        (first if about is None or about == gpu_class else later).append(reason)
    return first + later if later else reasons


def _priority_reason(
    ask: Ask,
    position: int,
    length: int,
    outcome: Outcome,
    estimate: EstimatedStart,
    times: Callable[[datetime], str],
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
        hint = f"estimated start {times(estimate.at)}"
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
