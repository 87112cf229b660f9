"""Why a job cannot start on a GPU class right now: the causes, layered and with their numbers.

``class_causes`` checks every layer independently — policy (quota, reservation), capacity (free,
reserved, unhealthy, maintenance, used outside the portal) and shape (MIG profile, gang,
topology) — so that all causes that hold are listed, binding one first. The binding one is chosen
so that removing it (raising the quota, ending the reservation, bringing nodes back, adding
capacity) admits the job or leaves it with its next cause.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from queues.admission.asks import Ask, shape_on, smaller_pod_hint
from queues.admission.capability import resolve_capability
from queues.admission.entitlement import gpu_text, quota_most
from queues.admission.pods import UNIT_WORDS
from queues.admission.reasons import PendingReason, ReasonCode, time_text
from queues.admission.snapshot import (
    COMING_MARK,
    CapacityKind,
    PreemptionClass,
    Queue,
    SharingMode,
    TopologyScope,
)
from queues.admission.state import MIG, TIME_SLICED, Pool, State, place, taint_key, tolerates

Option = tuple[CapacityKind, int | None, bool]


def eq_value(state: State, units: int) -> Fraction:
    return Fraction(units, state.scale)


def eq_json(state: State, units: int) -> int | float:
    value = eq_value(state, units)
    return int(value) if value.denominator == 1 else round(float(value), 4)


def eq_text(state: State, units: int) -> str:
    return gpu_text(eq_value(state, units))


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def entitlement(state: State, ask: Ask, gpu_class: str) -> list[Option]:
    """What may entitle ``ask`` to ``gpu_class`` now, preferred first: the team's own reservation
    (outside its quota), its nominal quota, or borrowing (graceful/preemptible queues that may
    borrow, up to the borrowing limit). The bool says whether idle reserved GPUs may be lent to it
    (preemptible work only)."""
    demand = ask.demand[gpu_class]
    queue = ask.queue
    key = (ask.job.team, gpu_class)
    options: list[Option] = []
    if key in state.holders:  # the simulation asks this for every start: most teams hold none
        for rid in state.holder_reservations(key[0], queue.name, gpu_class):
            if state.reservation_headroom(rid) >= demand:
                options.append((CapacityKind.RESERVED, rid, False))
                break
    if queue.reservation_only:
        return options
    nominal = state.nominal.get(key, 0)
    held = state.nominal_jobs_eq.get(key, 0)
    total = held + state.borrowed_jobs_eq.get(key, 0)
    # A job is admitted wholly as one kind. Jobs admitted as nominal (never reclaimed by a
    # lender) stay within nominal together; the team's total stays within nominal + borrowing
    # limit. A borrowed job fills whatever nominal room is left first, so what the team borrows
    # is its total beyond nominal (``State.quota_use``), never more than the borrowing limit.
    cap = nominal + state.borrow_limit.get(key, 0)
    if held + demand <= nominal and total + demand <= cap:
        options.append((CapacityKind.NOMINAL, None, False))
    elif total + demand <= cap and queue.can_borrow:
        lend = queue.preemption is PreemptionClass.PREEMPTIBLE
        options.append((CapacityKind.BORROWED, None, lend))
    return options


def class_causes(state: State, ask: Ask, gpu_class: str) -> list[PendingReason]:
    """Every cause that keeps ``ask`` off ``gpu_class`` now (empty: it would fit)."""
    causes: list[PendingReason] = []
    options = entitlement(state, ask, gpu_class)
    if not options:
        causes.append(policy_cause(state, ask, gpu_class))
        options = [_hypothetical_option(state, ask, gpu_class)]
    causes.extend(capacity_causes(state, ask, gpu_class, options))
    return causes


def _hypothetical_option(state: State, ask: Ask, gpu_class: str) -> Option:
    """The entitlement the job would use once its policy cause is removed."""
    if ask.queue.reservation_only:
        rids = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
        return (CapacityKind.RESERVED, rids[0] if rids else None, False)
    return (CapacityKind.NOMINAL, None, False)


def policy_cause(state: State, ask: Ask, gpu_class: str) -> PendingReason:
    team = ask.job.team
    queue = ask.queue
    demand = ask.demand[gpu_class]
    if queue.reservation_only:
        return _reservation_cause(state, ask, gpu_class)
    key = (team, gpu_class)
    use = state.quota_use(key)
    text = lambda units: eq_text(state, units)  # noqa: E731
    message = (
        f"team {team}: {gpu_class} quota {text(use.nominal_in_use)}/{text(use.nominal)} in use"
    )
    if use.borrowing_limit == 0:
        if queue.can_borrow:
            message += ", borrowing limit 0"
    elif queue.can_borrow or use.borrowed_in_use:
        message += f", borrowing {text(use.borrowed_in_use)}/{text(use.borrowing_limit)} in use"
    if use.above:
        message += f", {text(use.above)} more beyond quota + borrowing limit"
    message += f" (needs {text(demand)})"
    if not queue.can_borrow:
        message += f"; queue {queue.name} may not borrow"
    most = quota_most(
        nominal=use.nominal, borrowing_limit=use.borrowing_limit, may_borrow=queue.can_borrow
    )
    # More than the team may ever hold on this class (and no reservation of its own to use):
    # waiting does not help here, another class the job may use does.
    never_here = demand > most and not state.holder_reservations(team, queue.name, gpu_class)
    if never_here:
        message += f": never enough on {gpu_class}, where the team may hold at most {text(most)}"
    details = {
        "team": team,
        "gpu_class": gpu_class,
        "nominal": eq_json(state, use.nominal),
        "nominal_in_use": eq_json(state, use.nominal_in_use),
        "borrowing_limit": eq_json(state, use.borrowing_limit),
        "borrowed_in_use": eq_json(state, use.borrowed_in_use),
        "requested": eq_json(state, demand),
        "queue_may_borrow": queue.can_borrow,
    }
    if use.above:
        details["above_quota_in_use"] = eq_json(state, use.above)
    if never_here:
        details["most_entitled"] = eq_json(state, most)
        hint = (
            f"it waits for another GPU class it may use; for {gpu_class}, ask for at most "
            f"{text(most)} GPU-equivalents or ask an admin for more quota"
        )
    else:
        hint = _quota_hint(state, ask, gpu_class)
    return PendingReason(ReasonCode.QUOTA_EXCEEDED, message, details, hint)


def _quota_hint(state: State, ask: Ask, gpu_class: str) -> str:
    """Another queue that may borrow, else the team's job whose end (at its runtime limit) makes
    the team's quota entitle this job, with the same rules as ``entitlement``."""
    team = ask.job.team
    key = (team, gpu_class)
    demand = ask.demand[gpu_class]
    nominal = state.nominal.get(key, 0)
    cap = nominal + state.borrow_limit.get(key, 0)
    held = state.nominal_jobs_eq.get(key, 0)
    total = state.quota_total(key)
    can_borrow = ask.queue.can_borrow
    if not can_borrow and total + demand <= cap:
        other = borrowing_queue(state, ask, gpu_class)
        if other is not None:
            return (
                f"queue `{other.name}` may borrow idle {gpu_class} GPUs beyond your quota "
                f"({other.preemption.value}: it can be preempted, so checkpoint)"
            )
    if demand > (cap if can_borrow else nominal):
        return ""  # no job ending makes room: the estimate says it never starts this way
    ends = sorted(
        (a.end, a.job_id, a.eq, a.kind is CapacityKind.NOMINAL)
        for a in state.class_allocs[gpu_class].values()
        if a.team == team and a.kind is not CapacityKind.RESERVED
    )
    for end, job_id, eq, is_nominal in ends:
        total -= eq
        held -= eq if is_nominal else 0
        if total + demand <= cap and (can_borrow or held + demand <= nominal):
            return (
                f"your team's {gpu_class} quota frees up when job {job_id} ends, "
                f"at the latest {time_text(end)}"
            )
    return ""


def borrowing_queue(state: State, ask: Ask, gpu_class: str) -> Queue | None:
    """Another queue the team may use that may borrow and takes this capability and class."""
    for queue in sorted(state.queues.values(), key=lambda q: (-q.priority, q.name)):
        if queue.name == ask.queue.name or not queue.can_borrow or queue.reservation_only:
            continue
        if queue.teams and ask.job.team not in queue.teams:
            continue
        if queue.capability_classes and ask.job.capability not in queue.capability_classes:
            continue
        if queue.gpu_classes and gpu_class not in queue.gpu_classes:
            continue
        if queue.sharing != ask.queue.sharing:
            continue
        return queue
    return None


def _reservation_cause(state: State, ask: Ask, gpu_class: str) -> PendingReason:
    team = ask.job.team
    rids = state.holder_reservations(team, ask.queue.name, gpu_class)
    base: dict[str, object] = {"team": team, "gpu_class": gpu_class, "queue": ask.queue.name}
    if not rids:
        message = (
            f"queue {ask.queue.name} runs only on reservations; "
            f"team {team} holds no {gpu_class} reservation"
        )
        return PendingReason(
            ReasonCode.RESERVATION_WINDOW, message, {**base, "reservation_id": None}
        )
    active = [rid for rid in rids if state.res_active[rid]]
    if active:
        rid = active[0]
        amount = state.res_amount[rid]
        used = state.res_used[rid]
        message = (
            f"team {team}: {state.reservations[rid].label} ({gpu_class}) {eq_text(state, used)}/"
            f"{eq_text(state, amount)} in use (needs {eq_text(state, ask.demand[gpu_class])})"
        )
        details = {
            **base,
            "reservation_id": rid,
            "reserved": eq_json(state, amount),
            "reserved_in_use": eq_json(state, used),
            "requested": eq_json(state, ask.demand[gpu_class]),
        }
        ends = sorted(
            (a.end, a.job_id)
            for a in state.class_allocs[gpu_class].values()
            if a.reservation_id == rid
        )
        hint = ""
        if ends:
            end, job_id = ends[0]
            hint = f"reserved GPUs free up when job {job_id} ends, at the latest {time_text(end)}"
        return PendingReason(ReasonCode.QUOTA_EXCEEDED, message, details, hint)
    upcoming = sorted(
        (start, rid)
        for rid in rids
        if (start := state.reservations[rid].start) is not None and start > state.now
    )
    if upcoming:
        start, rid = upcoming[0]
        label = state.reservations[rid].label
        message = f"team {team}'s {label} ({gpu_class}) starts {time_text(start)}"
        hint = f"the job can start when {label} opens at {time_text(start)}"
        details = {**base, "reservation_id": rid, "starts_at": start.isoformat()}
        return PendingReason(ReasonCode.RESERVATION_WINDOW, message, details, hint)
    rid = rids[-1]
    ended = state.reservations[rid].end
    message = f"team {team}'s {state.reservations[rid].label} ({gpu_class}) has ended"
    details = {**base, "reservation_id": rid, "ended_at": ended.isoformat() if ended else None}
    return PendingReason(ReasonCode.RESERVATION_WINDOW, message, details)


@dataclass(slots=True)
class PoolView:
    """One pool as one request sees it, split by what the request may use.

    *Open* nodes are eligible (healthy, not cordoned or draining) and carry no taint the request
    does not tolerate: only they count as free for it. *Tainted* nodes are eligible but carry such
    a taint (only those with free devices are listed, as local indices). *Down* nodes are
    unhealthy or in maintenance and carry no such taint: a drained node the queue could never use
    is no reason to wait for it. Amounts on open nodes are devices of the pool (``free``) or
    scaled GPU-eq (``*_eq``).
    """

    open_nodes: int
    nodes_with_free: int
    free: int
    free_eq: int
    capacity_eq: int
    outside_eq: int
    tainted: list[int]
    tainted_free: int
    tainted_eq: int
    down: list[int]

    @property
    def matching(self) -> int:
        """Nodes of the pool the request tolerates, eligible or not."""
        return self.open_nodes + len(self.down)


def pool_view(
    pool: Pool, tolerations: frozenset[str], excluded: frozenset[int] = frozenset()
) -> PoolView:
    """Split ``pool``'s nodes for a request with ``tolerations`` (see ``PoolView``).

    Free devices of an over-committed node count as 0, its GPU-eq as is, the way the pool's own
    aggregates count them, so an untainted pool's view is those aggregates (no scan: most pools
    have no taints, and the diagnosis asks often). Nodes ``excluded`` (too small for the
    request's pods) are left out altogether."""
    if not pool.tainted and not excluded:
        down = [local for local, ok in enumerate(pool.eligible) if not ok]
        open_nodes = len(pool.nodes) - len(down)
        empty = len(pool.by_free[0]) if pool.by_free else 0
        return PoolView(
            open_nodes,
            open_nodes - empty,
            pool.free_devices,
            pool.free_eq,
            pool.capacity_eq,
            pool.outside_eq,
            [],
            0,
            0,
            down,
        )
    view = PoolView(0, 0, 0, 0, 0, 0, [], 0, 0, [])
    for local in range(len(pool.nodes)):
        if local in excluded:
            continue
        free = pool.free[local]
        unit = pool.unit[local]
        if pool.tainted and not tolerates(pool, local, tolerations):
            if pool.eligible[local] and free > 0:
                view.tainted.append(local)
                view.tainted_free += free
                view.tainted_eq += free * unit
            continue
        if not pool.eligible[local]:
            view.down.append(local)
            continue
        view.open_nodes += 1
        if free > 0:
            view.nodes_with_free += 1
        view.free += max(0, free)
        view.free_eq += free * unit
        view.capacity_eq += pool.total[local] * unit
        view.outside_eq += (pool.total[local] - pool.cap[local]) * unit
    return view


def _open_free(
    pool: Pool, tolerations: frozenset[str], excluded: frozenset[int] = frozenset()
) -> tuple[int, int]:
    """Free devices and scaled GPU-eq on ``pool``'s open nodes; from the aggregates when no node
    is tainted (the common case), so the check costs nothing."""
    if not pool.tainted and not excluded:
        return pool.free_devices, pool.free_eq
    view = pool_view(pool, tolerations, excluded)
    return view.free, view.free_eq


def capacity_causes(
    state: State, ask: Ask, gpu_class: str, options: list[Option]
) -> list[PendingReason]:
    """Capacity and shape causes under the most permissive of ``options`` (empty: it fits).

    Every amount is of the request's own pool (its class, mode and MIG profile): free MIG slices
    are no capacity for a whole-GPU job. Free devices on nodes with taints the queue does not
    tolerate are not free for it: a shortage they would cover is reported as such (naming the
    taints), and ``Fragmentation`` or ``Topology`` are claimed only when enough is free on open
    nodes in total."""
    # build_asks keeps only classes with a pool for the request's kind of device
    pool = state.pools[(gpu_class, ask.mode, ask.profile)]
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    best: Option = options[0]
    best_usable = None
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    for option in options:
        usable = state.usable(gpu_class, *option, own)
        if demand <= usable and place(pool, shape) is not None:
            return []
        if best_usable is None or usable > best_usable:
            best, best_usable = option, usable
    assert best_usable is not None
    if (
        shape.pod_limits
        and demand <= best_usable
        and place(pool, shape.without_size_limits()) is not None
    ):
        return [_small_nodes_cause(state, ask, gpu_class, pool)]  # only the nodes' sizes bar it
    causes: list[PendingReason] = []
    needed = shape.pods * shape.devices
    open_free, open_eq = _open_free(pool, shape.tolerations, shape.excluded)
    if best_usable < demand <= pool.free_eq:
        causes.append(_reserved_cause(state, ask, gpu_class, pool, best, best_usable))
    if demand > open_eq or open_free < needed:
        view = pool_view(pool, shape.tolerations, shape.excluded)
        causes.extend(_shortage_causes(state, ask, gpu_class, pool, view, best_usable))
    elif not causes:
        causes.extend(_shape_causes(state, ask, gpu_class, pool))
    return causes


def _reserved_cause(
    state: State, ask: Ask, gpu_class: str, pool: Pool, option: Option, usable: int
) -> PendingReason:
    """Enough is free in the request's pool, but idle reservations of others hold part of the
    class (reservations are class-wide amounts, so what they hold is counted against it)."""
    holders = sorted(
        (rid, state.reservations[rid].team, state.res_idle[rid])
        for rid in state.reservations
        if state.reservations[rid].gpu_class == gpu_class
        and state.res_idle.get(rid, 0) > 0
        and rid != option[1]
        and rid not in state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    )
    free = pool.free_eq
    unreserved = max(0, usable)
    idle = free - unreserved
    who = (
        ", ".join(f"{state.reservations[rid].label} of team {team}" for rid, team, _ in holders)
        or "reservations"
    )
    message = (
        f"{eq_text(state, free)} {gpu_class} GPUs are free but {eq_text(state, idle)} of them are "
        f"reserved ({who}); needs {eq_text(state, ask.demand[gpu_class])}, "
        f"{eq_text(state, unreserved)} unreserved"
    )
    details = {
        "gpu_class": gpu_class,
        "free": eq_json(state, free),
        "reserved_idle": eq_json(state, idle),
        "unreserved_free": eq_json(state, unreserved),
        "requested": eq_json(state, ask.demand[gpu_class]),
        "reservations": [rid for rid, _, _ in holders],
    }
    hint = ""
    lender = _lending_queue(state, ask, gpu_class)
    if lender is not None:
        hint = f"queue `{lender.name}` is preemptible and may run on idle reserved {gpu_class} GPUs"
    else:
        ends = sorted(
            (state.reservations[rid].end, rid)
            for rid, _, _ in holders
            if state.reservations[rid].end is not None
        )
        if ends:
            end, rid = ends[0]
            assert end is not None
            hint = f"{state.reservations[rid].label} ends at {time_text(end)}"
    return PendingReason(ReasonCode.RESERVED_CAPACITY, message, details, hint)


def _lending_queue(state: State, ask: Ask, gpu_class: str) -> Queue | None:
    if ask.queue.preemption is PreemptionClass.PREEMPTIBLE and ask.queue.can_borrow:
        return None
    queue = borrowing_queue(state, ask, gpu_class)
    if queue is not None and queue.preemption is PreemptionClass.PREEMPTIBLE:
        return queue
    return None


# Nodes a reason names one by one; past this many, it says how many more.
NODES_NAMED = 4


def _nodes_text(nodes: list[tuple[str, str]]) -> str:
    """``n2, n3: ECC errors`` when the nodes share a note, else ``n2: ECC errors; n3: XID 79``;
    at most ``NODES_NAMED`` of them, then how many more."""
    shown, more = nodes[:NODES_NAMED], len(nodes) - NODES_NAMED
    notes = {note for _, note in shown}
    if len(notes) == 1:
        text = f"{', '.join(name for name, _ in shown)}: {notes.pop()}"
    else:
        text = "; ".join(f"{name}: {note}" for name, note in shown)
    return text + (f"; and {more} more" if more > 0 else "")


def _shortage_causes(
    state: State, ask: Ask, gpu_class: str, pool: Pool, view: PoolView, usable: int
) -> list[PendingReason]:
    """Not enough free capacity on open nodes: say so, and whether unhealthy, maintenance or
    tainted nodes hold it. Each of those binds (comes first) only when what it holds covers the
    shortfall, so that removing it would let the job start."""
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    needed = shape.pods * shape.devices
    unit = UNIT_WORDS[ask.mode]
    usable_eq = min(view.free_eq, max(usable, 0))
    short_devices = max(0, needed - view.free)
    short_eq = max(0, demand - usable_eq)
    down: dict[str, list[tuple[str, int, int, str]]] = {
        "unhealthy": [],
        "maintenance": [],
        "coming": [],
    }
    for local in view.down:
        index = pool.nodes[local]
        node = state.nodes[index]
        kind = "unhealthy" if not node.healthy else "maintenance"
        if COMING_MARK in node.name:  # a node pool's node not there yet (elastic.py)
            kind = "coming"
        down[kind].append(
            (
                node.name,
                pool.free[local],
                pool.free[local] * pool.unit[local],
                _node_note(state, index),
            )
        )
    matching = view.matching
    causes: list[PendingReason] = []
    extra: list[PendingReason] = []
    for kind, code in (
        ("maintenance", ReasonCode.MAINTENANCE),
        ("coming", ReasonCode.MAINTENANCE),  # told apart, and reworded, by elastic.py
        ("unhealthy", ReasonCode.UNHEALTHY),
    ):
        nodes = down[kind]
        if not nodes:
            continue
        devices = sum(n[1] for n in nodes)
        eq = sum(n[2] for n in nodes)
        what = "unhealthy" if kind == "unhealthy" else "in maintenance"
        verb = "is" if len(nodes) == 1 else "are"
        message = (
            f"{len(nodes)} of the {matching} matching nodes {verb} {what} "
            f"({_nodes_text([(n[0], n[3]) for n in nodes])}); "
            f"{'it holds' if len(nodes) == 1 else 'they hold'} {plural(devices, 'free ' + unit)}"
        )
        details = {
            "gpu_class": gpu_class,
            "matching_nodes": matching,
            "nodes": [n[0] for n in nodes],
            "free_on_them": devices,
            "unit": unit,
        }
        hint = ""
        if kind != "unhealthy":
            backs = sorted(
                (state.nodes[state.node_index[n[0]]].maintenance_until, n[0])
                for n in nodes
                if state.nodes[state.node_index[n[0]]].maintenance_until is not None
            )
            if backs:
                when, name = backs[0]
                assert when is not None
                hint = f"{name} is expected back at {time_text(when)}"
        reason = PendingReason(code, message, details, hint)
        if devices >= short_devices and eq >= short_eq:
            causes.append(reason)
        else:
            extra.append(reason)
    if view.tainted and view.tainted_free >= short_devices and view.tainted_eq >= short_eq:
        # The free capacity is there, only not for this queue: name the taints instead of a
        # bare shortage (which would read "0 free" beside free GPUs the user can see).
        causes.append(_taint_reason(state, ask, gpu_class, pool, view))
        return causes + extra
    code = (
        ReasonCode.MIG_PROFILE_UNAVAILABLE if ask.mode == MIG else ReasonCode.INSUFFICIENT_CAPACITY
    )
    causes.append(_shortage_reason(state, ask, gpu_class, pool, view, usable_eq, code))
    return causes + extra


def _node_note(state: State, index: int) -> str:
    node = state.nodes[index]
    if not node.healthy:
        return node.health_reason or "unhealthy"
    note = node.maintenance_reason or node.maintenance.value
    if node.maintenance_until is not None:
        note += f", back {time_text(node.maintenance_until)}"
    return note


def _device_noun(ask: Ask, gpu_class: str, count: int) -> str:
    """``h100-80gb GPUs``, ``1g.10gb slices of h100-80gb``, ``time-sliced replicas of l4-24gb``
    (singular when ``count`` is 1)."""
    one = count == 1
    if ask.mode == MIG:
        return f"{ask.profile} {'slice' if one else 'slices'} of {gpu_class}"
    if ask.mode == TIME_SLICED:
        return f"time-sliced {'replica' if one else 'replicas'} of {gpu_class}"
    return f"{gpu_class} {'GPU' if one else 'GPUs'}"


def _devices_text(ask: Ask, gpu_class: str, count: int) -> str:
    """``8 h100-80gb GPUs``, ``1 × 1g.10gb slice of h100-80gb``, ``2 time-sliced replicas of …``."""
    noun = _device_noun(ask, gpu_class, count)
    return f"{count} × {noun}" if ask.mode == MIG else f"{count} {noun}"


def untolerated(state: State, pool: Pool, local: int, tolerations: frozenset[str]) -> list[str]:
    """The taints of a node, as written on it, that ``tolerations`` do not cover."""
    node = state.nodes[pool.nodes[local]]
    return [t for t in node.taints if "*" not in tolerations and taint_key(t) not in tolerations]


def taints_text(state: State, pool: Pool, locals_: list[int], tolerations: frozenset[str]) -> str:
    """``h100-perf: dedicated=perf:NoSchedule; h100-x: a:NoSchedule; and 2 more``."""
    shown = [
        f"{state.nodes[pool.nodes[local]].name}: "
        + ", ".join(untolerated(state, pool, local, tolerations))
        for local in locals_[:3]
    ]
    if len(locals_) > 3:
        shown.append(f"and {len(locals_) - 3} more")
    return "; ".join(shown)


def _taint_reason(
    state: State, ask: Ask, gpu_class: str, pool: Pool, view: PoolView
) -> PendingReason:
    """Free capacity sits on nodes with taints the queue does not tolerate."""
    shape = ask.shapes[gpu_class]
    queue = ask.queue.name
    needed = shape.pods * shape.devices
    tainted = view.tainted_free
    listing = taints_text(state, pool, view.tainted, shape.tolerations)
    if view.free == 0:
        verb = "is" if tainted == 1 else "are"
        message = (
            f"{tainted} free {_device_noun(ask, gpu_class, tainted)} {verb} "
            f"only on nodes with taints queue {queue} does not tolerate ({listing}); "
            f"needs {needed}"
        )
    else:
        total = tainted + view.free
        message = (
            f"{tainted} of the {total} free {_device_noun(ask, gpu_class, total)} "
            "are on nodes with taints "
            f"queue {queue} does not tolerate ({listing}); needs {needed}, "
            f"{view.free} free on the others"
        )
    names = [state.nodes[pool.nodes[local]].name for local in view.tainted]
    details: dict[str, Any] = {
        "gpu_class": gpu_class,
        "queue": queue,
        "unit": UNIT_WORDS[ask.mode],
        "requested": needed,
        "free": view.free,
        "tainted_free": tainted,
        "tainted_free_gpu_eq": eq_json(state, view.tainted_eq),
        "nodes": names,
        "taints": {
            name: untolerated(state, pool, local, shape.tolerations)
            for name, local in zip(names, view.tainted, strict=True)
        },
    }
    if ask.mode == MIG:
        details["profile"] = ask.profile
    return PendingReason(
        ReasonCode.INSUFFICIENT_CAPACITY,
        message,
        details,
        _tolerating_queue_hint(state, ask, gpu_class, pool, view),
    )


def other_queues_taking(state: State, ask: Ask, gpu_class: str) -> list[Queue]:
    """The job's team's other queues that would take the same job on ``gpu_class``, in the
    order they run (priority, then name)."""
    found = []
    for queue in sorted(state.queues.values(), key=lambda q: (-q.priority, q.name)):
        if queue.name == ask.queue.name or queue.reservation_only:
            continue
        if queue.teams and ask.job.team not in queue.teams:
            continue
        if queue.capability_classes and ask.job.capability not in queue.capability_classes:
            continue
        if queue.gpu_classes and gpu_class not in queue.gpu_classes:
            continue
        if ask.mode != MIG and (queue.sharing is SharingMode.TIME_SLICED) != (
            ask.mode == TIME_SLICED
        ):
            continue
        found.append(queue)
    return found


def _tolerating_queue_hint(
    state: State, ask: Ask, gpu_class: str, pool: Pool, view: PoolView
) -> str:
    """Another queue of the team that takes this job and tolerates enough of the taints that its
    free devices there, with those on open nodes, would cover the request."""
    needed = ask.shapes[gpu_class].pods * ask.shapes[gpu_class].devices
    for queue in other_queues_taking(state, ask, gpu_class):
        tolerations = frozenset(queue.tolerations)
        covered = [local for local in view.tainted if tolerates(pool, local, tolerations)]
        if covered and view.free + sum(pool.free[local] for local in covered) >= needed:
            names = ", ".join(state.nodes[pool.nodes[local]].name for local in covered[:3])
            if len(covered) > 3:
                names += f" and {len(covered) - 3} more"
            return f"queue `{queue.name}` tolerates the taints on {names}"
    return ""


def _shortage_reason(
    state: State,
    ask: Ask,
    gpu_class: str,
    pool: Pool,
    view: PoolView,
    usable_eq: int,
    code: ReasonCode,
) -> PendingReason:
    """Too little is free on open nodes. Amounts are of the request's pool and its open nodes:
    ``free_gpu_eq`` is what of it is also unreserved, ``capacity_gpu_eq`` and ``outside_gpu_eq``
    what those nodes hold in all and outside the portal."""
    shape = ask.shapes[gpu_class]
    needed = shape.pods * shape.devices
    pool_free = view.free
    nodes_with_free = view.nodes_with_free
    outside = view.outside_eq
    what = _devices_text(ask, gpu_class, needed)
    if ask.mode == MIG:
        free_text = f"{pool_free} free across {plural(nodes_with_free, 'node')}"
    else:
        free_text = f"{pool_free} free"
    message = f"needs {what}; {free_text}"
    if pool_free >= needed and ask.demand[gpu_class] > usable_eq:
        message += f" but only {eq_text(state, usable_eq)} GPU-equivalents of {gpu_class} are free"
    if outside:
        message += f" ({eq_text(state, outside)} used outside the portal)"
    if view.tainted:
        message += (
            f"; {view.tainted_free} more on nodes with taints queue {ask.queue.name} does not "
            f"tolerate ({taints_text(state, pool, view.tainted, shape.tolerations)})"
        )
    details: dict[str, Any] = {
        "gpu_class": gpu_class,
        "requested": needed,
        "free": pool_free,
        "unit": UNIT_WORDS[ask.mode],
        "requested_gpu_eq": eq_json(state, ask.demand[gpu_class]),
        "free_gpu_eq": eq_json(state, usable_eq),
        "capacity_gpu_eq": eq_json(state, view.capacity_eq),
        "outside_gpu_eq": eq_json(state, outside),
    }
    if ask.mode == MIG:
        details["profile"] = ask.profile
        details["nodes_with_free"] = nodes_with_free
    if view.tainted:
        details["tainted_free"] = view.tainted_free
        details["tainted_nodes"] = [state.nodes[pool.nodes[local]].name for local in view.tainted]
    hint = _alternative_capability_hint(state, ask, gpu_class) or _frees_hint(
        state, ask, gpu_class, pool, view
    )
    return PendingReason(code, message, details, hint)


def _alternative_capability_hint(state: State, ask: Ask, gpu_class: str) -> str:
    """A capability class this queue accepts whose matches have enough free capacity now."""
    demand = ask.demand[gpu_class]
    allowed = [
        g.spec
        for g in sorted(state.classes.values(), key=lambda g: (Fraction(g.weight), g.name))
        if (not ask.queue.gpu_classes or g.name in ask.queue.gpu_classes)
        and g.name not in ask.classes
    ]
    if not allowed:
        return ""
    for capability in sorted(state.snapshot.capability_classes, key=lambda c: c.name):
        if capability.name == ask.job.capability:
            continue
        if ask.queue.capability_classes and capability.name not in ask.queue.capability_classes:
            continue
        if (capability.mig_profile is None) != (ask.profile is None):
            continue
        for name in resolve_capability(capability, allowed).matches:
            pool = state.pools.get((name, ask.mode, capability.mig_profile))
            if pool is None:
                continue
            shape = shape_on(state, ask.shapes[gpu_class], pool, ask.job)
            own = state.holder_reservations(ask.job.team, ask.queue.name, name)
            if state.usable(name, CapacityKind.NOMINAL, None, False, own) >= demand and place(
                pool, shape
            ):
                return f"capability class `{capability.name}` would also match the free {name} GPUs"
    return ""


def _frees_hint(state: State, ask: Ask, gpu_class: str, pool: Pool, view: PoolView) -> str:
    """When running jobs reaching their limits free enough devices on this pool's open nodes."""
    shape = ask.shapes[gpu_class]
    short = shape.pods * shape.devices - view.free
    if short <= 0:
        return ""
    # devices freed on tainted nodes are no use to this queue, so a tainted pool's releases
    # depend on the tolerations
    tolerations = shape.tolerations if pool.tainted else frozenset()
    memo_key = (id(pool), tolerations, shape.excluded, state.class_version[gpu_class])
    releases = state.releases_memo.get(memo_key)
    if releases is None:
        # what each job gives back is worked out once (its pods do not move), the order of
        # the class's ends at each version of it (a pass admits between two hints)
        known = state.release_devices.setdefault(
            (id(pool), tolerations, shape.excluded, state.eligible_changes), {}
        )
        ends = []
        for alloc in state.class_allocs[gpu_class].values():
            seen = known.get(alloc.job_id)
            if seen is None or seen[0] is not alloc:
                devices = sum(
                    s.devices
                    for s in alloc.spots
                    if s.pool is pool
                    and pool.eligible[s.local]
                    and s.local not in shape.excluded
                    and (not pool.tainted or tolerates(pool, s.local, tolerations))
                )
                seen = known[alloc.job_id] = (alloc, devices)
            ends.append((alloc.end, alloc.stopping, seen[1]))
        releases = sorted(ends)
        state.releases_memo[memo_key] = releases
    freed = 0
    stopping = running = False
    for end, is_stopping, devices in releases:
        freed += devices
        stopping, running = stopping or is_stopping, running or not is_stopping
        if freed >= short:
            how = (
                "as stopping jobs' pods end their grace period"
                if not running
                else "as stopping jobs end and running jobs reach their runtime limits"
                if stopping
                else "as running jobs reach their runtime limits"
            )
            return (
                f"{plural(short, 'more ' + UNIT_WORDS[ask.mode])} "
                f"{'frees' if short == 1 else 'free'} up by {time_text(end)} {how}"
            )
    return ""


def _shape_causes(state: State, ask: Ask, gpu_class: str, pool: Pool) -> list[PendingReason]:
    """Enough is free on open nodes in total, but not in a shape the job can use; and, if nodes
    with taints the queue does not tolerate would take it, say so too (not binding: the shape
    cause holds on the nodes the queue may use)."""
    shape = ask.shapes[gpu_class]
    causes = [_shape_cause(state, ask, gpu_class, pool)]
    view = pool_view(pool, shape.tolerations)
    if view.tainted and place(pool, replace(shape, tolerations=frozenset({"*"}))) is not None:
        causes.append(_taint_reason(state, ask, gpu_class, pool, view))
    return causes


def _small_nodes_cause(state: State, ask: Ask, gpu_class: str, pool: Pool) -> PendingReason:
    """The free devices would take the job, but the nodes they are on lack the CPU or memory
    for its pods (for as many of them as their GPUs would take)."""
    shape = ask.shapes[gpu_class]
    job = ask.job
    unit = UNIT_WORDS[ask.mode]
    short: list[tuple[int, int]] = []  # (local, pods its CPU and memory hold)
    for local, free in enumerate(pool.free):
        if not pool.eligible[local] or (
            pool.tainted and not tolerates(pool, local, shape.tolerations)
        ):
            continue
        by_devices = min(free // shape.devices, shape.pods)
        if by_devices and shape.pod_limits[local] < by_devices:
            short.append((local, shape.pod_limits[local]))
    names = [state.nodes[pool.nodes[local]].name for local, _ in short]
    holds = ", ".join(
        f"{name} holds {plural(most, 'pod') if most else 'none'}"
        for name, (_, most) in zip(names, short, strict=True)
    )
    pods = plural(shape.pods, "pod")
    message = (
        f"needs {pods} × {shape.devices} {unit}s on nodes that allocate "
        f"{job.cpu_millicores / 1000:g} CPU cores and {job.memory_mib:,} MiB per pod; the free "
        f"{gpu_class} {unit}s are on nodes without the CPU or memory for that ({holds})"
    )
    details = {
        "gpu_class": gpu_class,
        "cpu_millicores_per_pod": job.cpu_millicores,
        "memory_mib_per_pod": job.memory_mib,
        "too_small_nodes": names,
    }
    none = [(state.nodes[pool.nodes[local]], gpu_class) for local, most in short if most == 0]
    if none:
        hint = smaller_pod_hint(none, job)
    else:
        hint = "ask for fewer CPU cores or less memory per pod, so that more of its pods fit a node"
    return PendingReason(ReasonCode.INSUFFICIENT_CAPACITY, message, details, hint)


def _shape_cause(state: State, ask: Ask, gpu_class: str, pool: Pool) -> PendingReason:
    """Enough is free in total on open nodes, but not in a shape the job can use."""
    shape = ask.shapes[gpu_class]
    free_nodes = [
        (local, free)
        for local, free in enumerate(pool.free)
        if free > 0
        and pool.eligible[local]
        and local not in shape.excluded
        and (not pool.tainted or tolerates(pool, local, shape.tolerations))
    ]
    largest = max((free for _, free in free_nodes), default=0)
    total = sum(free for _, free in free_nodes)
    unit = UNIT_WORDS[ask.mode]
    if ask.mode == TIME_SLICED and shape.hbm and place(pool, replace(shape, hbm=0)) is not None:
        most = max((pool.hbm_free[local] for local, _ in free_nodes), default=0)
        message = (
            f"needs {shape.hbm} GB of declared GPU memory per pod on a time-sliced {gpu_class} "
            f"node; at most {most} GB is undeclared on any node with free replicas"
        )
        details = {"gpu_class": gpu_class, "memory_gb": shape.hbm, "largest_free_memory_gb": most}
        return PendingReason(ReasonCode.INSUFFICIENT_CAPACITY, message, details, "")
    if shape.topology is not TopologyScope.NONE and place(
        pool, replace(shape, topology=TopologyScope.NONE)
    ):
        scope = "rack" if shape.topology is TopologyScope.RACK else "network domain"
        labels = pool.rack if shape.topology is TopologyScope.RACK else pool.domain
        per_domain: dict[str, int] = {}
        for local, free in free_nodes:
            per_domain[labels[local]] = per_domain.get(labels[local], 0) + free // shape.devices
        best = max(per_domain.values(), default=0)
        message = (
            f"needs {shape.pods} pods × {shape.devices} {unit}s within one {scope}; "
            f"no {scope} has room (the best holds {plural(best, 'pod')}), "
            f"though they fit across {scope}s"
        )
        details = {
            "gpu_class": gpu_class,
            "scope": shape.topology.value,
            "pods": shape.pods,
            "per_pod": shape.devices,
            "best_domain_pods": best,
        }
        return PendingReason(ReasonCode.TOPOLOGY, message, details, "")
    if shape.pods == 1:
        want = f"{shape.devices} {unit}s on 1 node"
    else:
        want = f"{shape.pods} pods × {shape.devices} {unit}s"
    spread = plural(len(free_nodes), "node")
    message = f"needs {want}; {total} free across {spread} (largest block {largest})"
    details = {
        "gpu_class": gpu_class,
        "pods": shape.pods,
        "per_pod": shape.devices,
        "free": total,
        "nodes_with_free": len(free_nodes),
        "largest_block": largest,
    }
    hint = ""
    wanted = shape.pods * shape.devices
    for per_pod in range(shape.devices - 1, 0, -1):
        if wanted % per_pod == 0 and place(
            pool, replace(shape, pods=wanted // per_pod, devices=per_pod)
        ):
            hint = f"as {wanted // per_pod} pods × {per_pod} {unit}s it would fit now"
            break
    return PendingReason(ReasonCode.FRAGMENTATION, message, details, hint)
