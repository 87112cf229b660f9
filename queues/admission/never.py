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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from queues.admission.asks import Ask, smaller_pod_hint
from queues.admission.diagnose import (
    eq_json,
    eq_value,
    other_queues_taking,
    plural,
    taints_text,
    untolerated,
)
from queues.admission.entitlement import Entitlement, gpu_text, quota_hint
from queues.admission.pods import UNIT_WORDS, fits_empty_nodes
from queues.admission.reasons import PendingReason, ReasonCode
from queues.admission.snapshot import WARM_TAINT
from queues.admission.state import Pool, Shape, State, place

ANY_TAINT = frozenset({"*"})


def never_fits(state: State, ask: Ask) -> PendingReason | None:
    """``NeverFits`` for ``ask`` when no class it may use could ever take it; None when one
    could (however long the wait)."""
    # Judged once per kind of ask (``Ask.key``: its queue, capability, shape, team and runtime):
    # neither the user nor the cluster's use changes the verdict.
    memo = state.never_fits_memo
    if ask.key in memo:
        return memo[ask.key]
    reason = memo[ask.key] = _for_user(state, ask) or _for_classes(state, ask)
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


def per_user_gpu_cap(stored: object) -> Fraction | None:
    """A queue's stored per-user GPU cap (a number, or None) as the rules read it: unset or 0
    is no cap."""
    return Fraction(str(stored)) if stored else None


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
    most: dict[str, Fraction] = {}  # per class, the most the team could ever hold
    for gpu_class in ask.classes:
        entitled = entitlement_of(state, ask, gpu_class)
        shortfall = entitled.shortfall(eq_value(state, ask.demand[gpu_class]))
        if shortfall:
            why[gpu_class] = shortfall
            most[gpu_class] = entitled.most
            continue
        shape_problem = _shape_problem(state, ask, gpu_class)
        if shape_problem:
            why[gpu_class] = shape_problem
            continue
        return None
    if not why:
        return None
    details: dict[str, object] = {
        "gpu_classes": dict(why),
        "requested": {c: eq_json(state, ask.demand[c]) for c in why},
    }
    if most:
        details["most_entitled"] = {c: _json(value) for c, value in most.items()}
        if len(most) == len(why):  # only quota stands in the way: the class closest to enough
            details["team"] = ask.job.team
            details["quota_class"] = max(most, key=lambda c: (most[c], c))
    return PendingReason(
        ReasonCode.NEVER_FITS, never_fits_message(why), details, _hint(state, ask, most, why)
    )


def _json(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else round(float(value), 4)


def entitlement_of(state: State, ask: Ask, gpu_class: str) -> Entitlement:
    """The job's team's entitlement on ``gpu_class`` for the job's queue, from the snapshot:
    its quota, and its largest reservation open now or later."""
    team = ask.job.team
    reserved = max(
        (
            state.eq_units(state.reservations[rid].amount)
            for rid in state.holder_reservations(team, ask.queue.name, gpu_class)
            if (end := state.reservations[rid].end) is None or end > state.now
        ),
        default=0,
    )
    key = (team, gpu_class)
    return Entitlement(
        team=team,
        queue=ask.queue.name,
        nominal=eq_value(state, state.nominal.get(key, 0)),
        borrowing_limit=eq_value(state, state.borrow_limit.get(key, 0)),
        reserved=eq_value(state, reserved),
        may_borrow=ask.queue.can_borrow,
        reservation_only=ask.queue.reservation_only,
    )


def never_fits_message(why: Mapping[str, str]) -> str:
    """``NeverFits``' message from why each GPU class can never take the job."""
    return "can never start: " + "; ".join(f"{c}: {text}" for c, text in why.items())


# Why a class cannot take a job: it has no node serving the kind of device the job asks for.
NO_NODES = "the cluster has no nodes for this kind of request"
# What to do when the class's nodes are the problem and nothing more precise applies.
SHAPE_HINT = "ask for a shape the nodes can hold: fewer GPUs per pod, or less CPU or memory"


def too_big_text(*, pods: int, devices_per_pod: int, unit: str, devices: Sequence[int]) -> str:
    """Why ``pods`` pods of ``devices_per_pod`` devices never fit nodes offering ``devices``."""
    return (
        f"{plural(pods, 'pod')} × {plural(devices_per_pod, unit)} do not fit its "
        f"{plural(len(devices), 'node')} even when they are empty "
        f"(at most {plural(max(devices, default=0), unit)} a node)"
    )


@dataclass(frozen=True, slots=True)
class ClassView:
    """One GPU class a request may use, as submission reads it before the job exists: the
    team's entitlement there, what the job needs of it (GPU-equivalents), and the devices of
    the request's kind each of its nodes offers (None: the cluster has not been seen yet)."""

    name: str
    entitlement: Entitlement
    demand: Fraction
    devices: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class NeverFitsProblem:
    message: str
    hint: str


def request_never_fits(
    *, team: str, pods: int, devices_per_pod: int, unit: str, classes: Sequence[ClassView]
) -> NeverFitsProblem | None:
    """``NeverFits`` for a request before it is stored, on the GPU classes it may use in cost
    order: the engine's words for entitlement and for nodes too small for its pods. Taints,
    topology and CPU or memory the engine judges once the job waits; a class whose nodes have
    not been seen is given the benefit of the doubt."""
    why: dict[str, str] = {}
    most: dict[str, Fraction] = {}
    for view in classes:
        if shortfall := view.entitlement.shortfall(view.demand):
            why[view.name] = shortfall
            most[view.name] = view.entitlement.most
        elif view.devices is None:
            return None
        elif not view.devices:
            why[view.name] = NO_NODES
        elif not fits_empty_nodes(view.devices, pods=pods, devices_per_pod=devices_per_pod):
            why[view.name] = too_big_text(
                pods=pods, devices_per_pod=devices_per_pod, unit=unit, devices=view.devices
            )
        else:
            return None
    if not why:
        return None
    hint = quota_hint(team, most) if len(most) == len(why) else SHAPE_HINT
    return NeverFitsProblem(never_fits_message(why), hint)


def _shape_problem(state: State, ask: Ask, gpu_class: str) -> str:
    """Why the job's pods do not fit the class's nodes even when they are empty ("" if they
    do), with the numbers."""
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    if pool is None:
        return NO_NODES
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
    return too_big_text(
        pods=ask.job.pods, devices_per_pod=ask.job.gpus_per_pod, unit=unit, devices=pool.total
    )


def _hint(state: State, ask: Ask, most: dict[str, Fraction], why: dict[str, str]) -> str:
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
        return quota_hint(ask.job.team, most)
    return SHAPE_HINT


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
    key = (id(pool), shape)
    known = state.fits_empty_memo.get(key)
    if known is None:
        every = [True] * len(pool.nodes)
        known = (
            place(pool, shape, list(pool.total), eligible=every, hbm_free=pool.hbm_total)
            is not None
        )
        state.fits_empty_memo[key] = known
    return known
