"""The pass: each pending job in plan order is admitted where it fits now (under the shadows
ahead), else it tries preemption, else it gets its reasons and a shadow (``consider``).

Speed: jobs the planner would treat alike (same queue, team, capability, shape, runtime) share one
cached verdict per version of the capacity they depend on, so a full cluster costs one check per
distinct shape rather than one per job.
"""

from __future__ import annotations

from queues.admission.asks import Ask
from queues.admission.backfill import fit_shadowed, held_for, maybe_shadow, open_to
from queues.admission.diagnose import class_causes, entitlement, eq_json, eq_text, time_text
from queues.admission.fit import Fit, fit_class
from queues.admission.never import never_fits
from queues.admission.pass_state import Outcome, Pass, admit, versions
from queues.admission.preemption import preempt
from queues.admission.reasons import PendingReason, ReasonCode
from queues.admission.state import State


def consider(run: Pass, ask: Ask) -> None:
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
        fit = fit_any(run, ask)
        if fit is not None:
            admit(run, ask, fit)
            return
    explain = run.explain and (run.explain_only is None or ask.job.id in run.explain_only)
    # (a copy: a preemption notes its victims on the first reason)
    reasons = class_reasons(run, ask) if explain else list(blocked(run, ask))
    if user_cause is not None:
        run.outcomes.append(Outcome(ask, [user_cause, *reasons]))
        return
    outcome = Outcome(ask, reasons)
    if not reasons:
        # Every class would take it were it not for a reservation: a job ahead holds the
        # capacity. It gets its own reservation behind theirs.
        if explain:
            outcome.backfill_blocked_by, outcome.held_quota = held_for(run, ask)
        maybe_shadow(run, ask)
    elif not run.dry_run and run.preempt and preempt(run, ask, outcome):
        pass
    else:
        maybe_shadow(run, ask)
    run.outcomes.append(outcome)


def probe_fits_now(run: Pass, ask: Ask) -> bool:
    """Whether a probe would be admitted now at its place in the pass; reads the state only
    (no hold, no cached verdict, no shadow), so real jobs see the same pass."""
    if ask.static or user_limit_cause(run.state, ask) is not None:
        return False
    return any(
        fit_shadowed(run, ask, c, entitlement(run.state, ask, c), probe=True) is not None
        for c in ask.classes
    )


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


def fit_any(run: Pass, ask: Ask) -> Fit | None:
    key = (ask.key, versions(run.state, ask))
    if key in run.no_fit:
        return None
    for gpu_class in ask.classes:
        fit = fit_shadowed(run, ask, gpu_class, entitlement(run.state, ask, gpu_class))
        if fit is not None:
            return fit
    run.no_fit.add(key)
    return None


def class_reasons(run: Pass, ask: Ask) -> list[PendingReason]:
    """All causes over the job's classes, the class with the fewest causes first (removing its
    causes admits the job soonest), ties broken by cost order."""
    key = (ask.key, versions(run.state, ask))
    per_class = run.causes.get(key)
    if per_class is None:
        per_class = [(c, class_causes(run.state, ask, c)) for c in ask.classes]
        run.causes[key] = per_class
    if any(not causes for _, causes in per_class):
        return []
    # A class the team holds no quota, borrowing or reservation for only adds noise, unless
    # no class is open to it at all.
    open_to_team = [item for item in per_class if open_to(run.state, ask, item[0])]
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


def blocked(run: Pass, ask: Ask) -> list[PendingReason]:
    """What ``class_reasons`` would say, as far as the pass's decisions go: nothing when a class
    would take the job were it not for a head-of-queue reservation, a placeholder otherwise."""
    key = ("blocked", ask.key, versions(run.state, ask))
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
