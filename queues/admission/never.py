"""Jobs that no state of the cluster could ever admit, and why (``NeverFits``).

A job can never start on a GPU class when no entitlement is large enough (its team's nominal
quota plus the borrowing its queue allows, and its reservations, are all smaller than what it
needs), when the cluster has no nodes for that kind of request, or when its shape does not fit
the class's nodes even once every job has ended and maintenance is over. When that holds for
every class the job may use, waiting is pointless: the job says ``NeverFits`` with the numbers
and what would make it possible, has no estimated start and holds no capacity for itself.

Everything here depends on the snapshot only, so each kind of ask is judged once per plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from queues.admission.asks import Ask, smaller_pod_hint
from queues.admission.diagnose import (
    UNIT_WORDS,
    eq_json,
    eq_text,
    eq_value,
    gpu_text,
    other_queues_taking,
    plural,
    taints_text,
    untolerated,
)
from queues.admission.reasons import PendingReason, ReasonCode
from queues.admission.snapshot import WARM_TAINT
from queues.admission.state import Pool, Shape, State, place

ANY_TAINT = frozenset({"*"})


def never_fits(state: State, ask: Ask) -> PendingReason | None:
    """``NeverFits`` for ``ask`` when no class it may use could ever take it; None when one
    could (however long the wait)."""
    key = ("never fits", ask.key, ask.queue.name, ask.job.user)
    if key in state.memo:
        cached = state.memo[key]
        return cached if isinstance(cached, PendingReason) else None
    reason = _for_user(state, ask) or _for_classes(state, ask)
    state.memo[key] = reason
    return reason


@dataclass(frozen=True, slots=True)
class UserLimitProblem:
    """Why a queue's per-user limits keep a job out for ever, and what to do instead."""

    message: str
    hint: str
    user_limit: Fraction | None = None  # the per-user GPU cap, when that is what stands in the way


def user_limit_problem(
    *,
    queue: str,
    max_running_jobs_per_user: int | None,
    max_gpu_eq_per_user: Fraction | None,
    demand: Fraction,
) -> UserLimitProblem | None:
    """The one rule of the per-user limits that makes a job impossible, read by the engine
    (``NeverFits``) and by submission alike: a queue that lets a user run no job, or a job that
    needs more GPU-equivalents (``demand``) than the queue lets one user hold."""
    if max_running_jobs_per_user == 0:
        return UserLimitProblem(
            f"can never start: queue {queue} allows no running jobs per user", "use another queue"
        )
    if max_gpu_eq_per_user is not None and demand > max_gpu_eq_per_user:
        cap = gpu_text(max_gpu_eq_per_user)
        return UserLimitProblem(
            f"can never start: needs {gpu_text(demand)} GPUs; queue {queue} allows one user "
            f"at most {cap}",
            f"ask for at most {cap} GPUs, or use another queue",
            max_gpu_eq_per_user,
        )
    return None


def _for_user(state: State, ask: Ask) -> PendingReason | None:
    queue = ask.queue
    cap = queue.max_gpu_eq_per_user
    problem = user_limit_problem(
        queue=queue.name,
        max_running_jobs_per_user=queue.max_running_jobs_per_user,
        # both as the engine counts them: scaled units, rounded up
        max_gpu_eq_per_user=None if cap is None else eq_value(state, state.eq_units(cap)),
        demand=eq_value(state, ask.min_demand),
    )
    if problem is None:
        return None
    details: dict[str, object] = {"queue": queue.name}
    if problem.user_limit is not None:
        details |= {"requested": eq_json(state, ask.min_demand), "user_limit": float(cap or 0)}
    return PendingReason(ReasonCode.NEVER_FITS, problem.message, details, problem.hint)


def _for_classes(state: State, ask: Ask) -> PendingReason | None:
    why: dict[str, str] = {}
    most: dict[str, int] = {}  # per class, the most the team could ever hold
    for gpu_class in ask.classes:
        entitled = _most_entitled(state, ask, gpu_class)
        if ask.demand[gpu_class] > entitled:
            why[gpu_class] = _entitlement_text(state, ask, gpu_class, entitled)
            most[gpu_class] = entitled
            continue
        shape_problem = _shape_problem(state, ask, gpu_class)
        if shape_problem:
            why[gpu_class] = shape_problem
            continue
        return None
    if not why:
        return None
    message = "can never start: " + "; ".join(f"{c}: {text}" for c, text in why.items())
    details: dict[str, object] = {
        "gpu_classes": dict(why),
        "requested": {c: eq_json(state, ask.demand[c]) for c in why},
    }
    if most:
        details["most_entitled"] = {c: eq_json(state, units) for c, units in most.items()}
        if len(most) == len(why):  # only quota stands in the way: the class closest to enough
            details["team"] = ask.job.team
            details["quota_class"] = max(most, key=lambda c: (most[c], c))
    return PendingReason(ReasonCode.NEVER_FITS, message, details, _hint(state, ask, most, why))


def _most_entitled(state: State, ask: Ask, gpu_class: str) -> int:
    """The most scaled GPU-eq of ``gpu_class`` the job's team could ever hold for it: its largest
    reservation open now or later, or its nominal quota plus the borrowing its queue allows."""
    team = ask.job.team
    reserved = max(
        (
            state.eq_units(state.reservations[rid].amount)
            for rid in state.holder_reservations(team, ask.queue.name, gpu_class)
            if (end := state.reservations[rid].end) is None or end > state.now
        ),
        default=0,
    )
    if ask.queue.reservation_only:
        return reserved
    key = (team, gpu_class)
    quota = state.nominal.get(key, 0)
    if ask.queue.can_borrow:
        quota += state.borrow_limit.get(key, 0)
    return max(reserved, quota)


def _entitlement_text(state: State, ask: Ask, gpu_class: str, entitled: int) -> str:
    team, queue = ask.job.team, ask.queue
    needs = f"needs {eq_text(state, ask.demand[gpu_class])}"
    if queue.reservation_only:
        return f"{needs}; team {team}'s reservations hold at most {eq_text(state, entitled)}"
    key = (team, gpu_class)
    nominal = state.nominal.get(key, 0)
    borrowing = state.borrow_limit.get(key, 0)
    if queue.can_borrow:
        terms = f"nominal {eq_text(state, nominal)} + borrowing {eq_text(state, borrowing)}"
    else:
        terms = f"nominal {eq_text(state, nominal)}; queue {queue.name} may not borrow"
    return f"{needs}; team {team} may hold at most {eq_text(state, entitled)} ({terms})"


def _shape_problem(state: State, ask: Ask, gpu_class: str) -> str:
    """Why the job's pods do not fit the class's nodes even when they are empty ("" if they
    do), with the numbers."""
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    if pool is None:
        return "the cluster has no nodes for this kind of request"
    shape = ask.shapes[gpu_class]
    if _fits_empty(state, pool, shape):
        return ""
    unit = UNIT_WORDS[ask.mode]
    wanted = f"{plural(ask.job.pods, 'pod')} × {plural(ask.job.gpus_per_pod, unit)}"
    tainted = [
        local
        for local in range(len(pool.nodes))
        if untolerated(state, pool, local, shape.tolerations)
    ]
    untainted_cap = [c for local, c in enumerate(pool.total) if local not in tainted]
    too_small = sum(1 for most in shape.pod_limits if most == 0)
    pod_size = f"{ask.job.cpu_millicores / 1000:g} CPU cores and {ask.job.memory_mib:,} MiB"
    if tainted and _fits_empty(state, pool, replace(shape, tolerations=ANY_TAINT)):
        others = len(untainted_cap)
        most = plural(max(untainted_cap, default=0), unit)
        if not others:
            rest = "no other node"
        elif others == 1:
            rest = f"the other node holds at most {most}"
        else:
            rest = f"the {others} other nodes hold at most {most} each"
        return (
            f"{wanted} fit only with nodes that carry taints queue {ask.queue.name} does not "
            f"tolerate ({taints_text(state, pool, tainted, shape.tolerations)}); {rest}"
        )
    if too_small and _fits_empty(state, pool, shape.without_size_limits()):
        return (
            f"{wanted} fit only with less CPU or memory per pod: {too_small} of its "
            f"{plural(len(pool.nodes), 'node')} cannot hold a pod of {pod_size}"
        )
    if (
        tainted
        and too_small
        and _fits_empty(state, pool, replace(shape.without_size_limits(), tolerations=ANY_TAINT))
    ):
        return (
            f"{wanted} fit only with nodes that carry taints queue {ask.queue.name} does not "
            f"tolerate ({taints_text(state, pool, tainted, shape.tolerations)}), and only with "
            f"less CPU or memory per pod than {pod_size}"
        )
    return (
        f"{wanted} do not fit its {plural(len(pool.nodes), 'node')} even when they are empty "
        f"(at most {plural(max(pool.total, default=0), unit)} a node)"
    )


def _hint(state: State, ask: Ask, most: dict[str, int], why: dict[str, str]) -> str:
    """What would make the job possible: a queue of the team that tolerates the taints, a pod
    size a node can hold, or asking for what the quota allows."""
    for gpu_class in why:
        if gpu_class not in most and (queue := _tolerating_queue(state, ask, gpu_class)):
            return f"queue `{queue}` tolerates the taints these nodes carry"
    smaller = [  # the nodes too small for one pod, where the class's nodes are the problem
        (state.nodes[pool.nodes[local]], gpu_class)
        for gpu_class in why
        if gpu_class not in most
        and (pool := state.pools.get((gpu_class, ask.mode, ask.profile))) is not None
        for local, held in enumerate(ask.shapes[gpu_class].pod_limits)
        if held == 0
    ]
    if smaller:
        return smaller_pod_hint(smaller, ask.job)
    if most and len(most) == len(why):
        best_class = max(most, key=lambda c: (most[c], c))
        if not most[best_class]:
            return (
                f"team {ask.job.team} holds no quota or reservation it may use here: "
                "ask an admin for quota, or use another queue"
            )
        return (
            f"ask for at most {eq_text(state, most[best_class])} GPU-equivalents "
            f"({best_class}), or ask an admin for more quota"
        )
    return "ask for a shape the nodes can hold: fewer GPUs per pod, or less CPU or memory"


def _tolerating_queue(state: State, ask: Ask, gpu_class: str) -> str:
    """Another queue of the team whose tolerations let the job fit the class's empty nodes."""
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    if pool is None or not pool.tainted:
        return ""
    shape = ask.shapes[gpu_class]
    for queue in other_queues_taking(state, ask, gpu_class):
        if _fits_empty(state, pool, replace(shape, tolerations=frozenset(queue.tolerations))):
            return queue.name
    return ""


def _fits_empty(state: State, pool: Pool, shape: Shape) -> bool:
    """Whether ``shape`` fits ``pool`` once every job has ended, every node is back from
    maintenance and healthy (a broken or not-ready node is a state the cluster may leave), and
    pods the portal did not create have ended too: all devices free, and on time-sliced nodes
    all of their memory (memory running pods declared is a wait, not a never)."""
    held = frozenset(key for taints in pool.taints for key in taints if key.startswith(WARM_TAINT))
    if held:
        # a node held empty for a queue's warm floor (elastic.py) is a state the cluster leaves
        # as soon as that queue runs on it or the pool adds a node: a wait, not a never
        shape = replace(shape, tolerations=shape.tolerations | held)
    key = ("fits-empty", id(pool), shape)
    known = state.memo.get(key)
    if known is None:
        every = [True] * len(pool.nodes)
        known = (
            place(pool, shape, list(pool.total), eligible=every, hbm_free=pool.hbm_total)
            is not None
        )
        state.memo[key] = known
    return bool(known)
