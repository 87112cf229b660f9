"""Why a job cannot start on a GPU class right now: the causes, layered and with their numbers.

``class_causes`` checks every layer independently — policy (quota, reservation), capacity (free,
reserved, unhealthy, maintenance, used outside the portal) and shape (MIG profile, gang,
topology) — so that all causes that hold are listed, binding one first. The binding one is chosen
so that removing it (raising the quota, ending the reservation, bringing nodes back, adding
capacity) admits the job or leaves it with its next cause.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from fractions import Fraction
from typing import Any

from queues.admission.asks import Ask
from queues.admission.reasons import PendingReason, ReasonCode
from queues.admission.snapshot import CapacityKind, PreemptionClass, Queue, TopologyScope
from queues.admission.state import MIG, TIME_SLICED, Pool, State, place

Option = tuple[CapacityKind, int | None, bool]

UNIT_WORDS = {"x": "GPU", "m": "slice", "t": "replica"}


def eq_value(state: State, units: int) -> Fraction:
    return Fraction(units, state.scale)


def eq_json(state: State, units: int) -> int | float:
    value = eq_value(state, units)
    return int(value) if value.denominator == 1 else round(float(value), 4)


def eq_text(state: State, units: int) -> str:
    value = eq_value(state, units)
    if value.denominator == 1:
        return str(int(value))
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def time_text(now: datetime, when: datetime) -> str:
    """``14:30 UTC`` today, else ``2025-03-04 14:30 UTC``."""
    if when.date() == now.date():
        return when.strftime("%H:%M UTC")
    return when.strftime("%Y-%m-%d %H:%M UTC")


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def entitlement(state: State, ask: Ask, gpu_class: str) -> list[Option]:
    """What may entitle ``ask`` to ``gpu_class`` now, preferred first: the team's own reservation
    (outside its quota), its nominal quota, or borrowing (graceful/preemptible queues that may
    borrow, up to the borrowing limit). The bool says whether idle reserved GPUs may be lent to it
    (preemptible work only)."""
    demand = ask.demand[gpu_class]
    queue = ask.queue
    team = ask.job.team
    options: list[Option] = []
    for rid in state.holder_reservations(team, queue.name, gpu_class):
        if state.reservation_headroom(rid) >= demand:
            options.append((CapacityKind.RESERVED, rid, False))
            break
    if queue.reservation_only:
        return options
    key = (team, gpu_class)
    nominal = state.nominal.get(key, 0)
    used = state.nominal_used.get(key, 0)
    borrowed = state.borrowed_used.get(key, 0)
    # the team's total stays within nominal + borrowing limit even when borrowed jobs took the
    # room first: a whole job is either nominal or borrowed, never split
    cap = nominal + state.borrow_limit.get(key, 0)
    if used + demand <= nominal and used + borrowed + demand <= cap:
        options.append((CapacityKind.NOMINAL, None, False))
    elif queue.can_borrow and used + borrowed + demand <= cap:
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
    nominal = state.nominal.get(key, 0)
    used = state.nominal_used.get(key, 0)
    borrowed = state.borrowed_used.get(key, 0)
    limit = state.borrow_limit.get(key, 0)
    text = lambda units: eq_text(state, units)  # noqa: E731
    message = f"team {team}: {gpu_class} quota {text(used)}/{text(nominal)} in use"
    if queue.can_borrow:
        if borrowed >= limit:
            message += f", borrowing limit {text(limit)} reached"
        else:
            message += f", borrowing {text(borrowed)}/{text(limit)} in use"
        message += f" (needs {text(demand)})"
    else:
        message += f" (needs {text(demand)}); queue {queue.name} may not borrow"
    details = {
        "team": team,
        "gpu_class": gpu_class,
        "nominal": eq_json(state, nominal),
        "nominal_in_use": eq_json(state, used),
        "borrowing_limit": eq_json(state, limit),
        "borrowed_in_use": eq_json(state, borrowed),
        "requested": eq_json(state, demand),
        "queue_may_borrow": queue.can_borrow,
    }
    return PendingReason(
        ReasonCode.QUOTA_EXCEEDED, message, details, _quota_hint(state, ask, gpu_class)
    )


def _quota_hint(state: State, ask: Ask, gpu_class: str) -> str:
    team = ask.job.team
    key = (team, gpu_class)
    demand = ask.demand[gpu_class]
    nominal = state.nominal.get(key, 0)
    total = nominal + state.borrow_limit.get(key, 0)
    used = state.nominal_used.get(key, 0) + state.borrowed_used.get(key, 0)
    if not ask.queue.can_borrow and used + demand <= total:
        other = borrowing_queue(state, ask, gpu_class)
        if other is not None:
            return (
                f"queue `{other.name}` may borrow idle {gpu_class} GPUs beyond your quota "
                f"({other.preemption.value}: it can be preempted, so checkpoint)"
            )
    need = state.nominal_used.get(key, 0) + demand - nominal
    ends = sorted(
        (a.end, a.job_id, a.eq)
        for a in state.class_allocs[gpu_class].values()
        if a.team == team and a.kind is CapacityKind.NOMINAL
    )
    freed = 0
    for end, job_id, eq in ends:
        freed += eq
        if freed >= need:
            return (
                f"your team's {gpu_class} quota frees up when job {job_id} ends, "
                f"at the latest {time_text(state.now, end)}"
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
    base = {"team": team, "gpu_class": gpu_class, "queue": ask.queue.name}
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
            f"team {team}: reservation {rid} ({gpu_class}) {eq_text(state, used)}/"
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
            hint = (
                f"reserved GPUs free up when job {job_id} ends, "
                f"at the latest {time_text(state.now, end)}"
            )
        return PendingReason(ReasonCode.QUOTA_EXCEEDED, message, details, hint)
    upcoming = sorted(
        (state.reservations[rid].start, rid)
        for rid in rids
        if state.reservations[rid].start is not None and state.reservations[rid].start > state.now
    )
    if upcoming:
        start, rid = upcoming[0]
        assert start is not None
        message = (
            f"team {team}'s reservation {rid} ({gpu_class}) starts {time_text(state.now, start)}"
        )
        hint = f"the job can start when reservation {rid} opens at {time_text(state.now, start)}"
        details = {**base, "reservation_id": rid, "starts_at": start.isoformat()}
        return PendingReason(ReasonCode.RESERVATION_WINDOW, message, details, hint)
    rid = rids[-1]
    end = state.reservations[rid].end
    message = f"team {team}'s reservation {rid} ({gpu_class}) has ended"
    details = {**base, "reservation_id": rid, "ended_at": end.isoformat() if end else None}
    return PendingReason(ReasonCode.RESERVATION_WINDOW, message, details)


def capacity_causes(
    state: State, ask: Ask, gpu_class: str, options: list[Option]
) -> list[PendingReason]:
    """Capacity and shape causes under the most permissive of ``options`` (empty: it fits)."""
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    best: Option = options[0]
    best_usable = None
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    for option in options:
        usable = state.usable(gpu_class, *option, own)
        if pool is not None and demand <= usable and place(pool, shape) is not None:
            return []
        if best_usable is None or usable > best_usable:
            best, best_usable = option, usable
    assert best_usable is not None
    causes: list[PendingReason] = []
    needed = shape.pods * shape.devices
    pool_free = pool.free_devices if pool is not None else 0
    class_free = state.class_free[gpu_class]
    if best_usable < demand <= class_free:
        causes.append(_reserved_cause(state, ask, gpu_class, best, best_usable))
    if demand > class_free or pool_free < needed:
        causes.extend(_shortage_causes(state, ask, gpu_class, pool, best_usable))
    elif pool is not None and not causes:
        causes.append(_shape_cause(state, ask, gpu_class, pool))
    return causes


def _reserved_cause(
    state: State, ask: Ask, gpu_class: str, option: Option, usable: int
) -> PendingReason:
    holders = sorted(
        (rid, state.reservations[rid].team, state.res_idle[rid])
        for rid in state.reservations
        if state.reservations[rid].gpu_class == gpu_class
        and state.res_idle.get(rid, 0) > 0
        and rid != option[1]
        and rid not in state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    )
    free = state.class_free[gpu_class]
    idle = free - usable
    who = (
        ", ".join(f"reservation {rid} of team {team}" for rid, team, _ in holders) or "reservations"
    )
    message = (
        f"{eq_text(state, free)} {gpu_class} GPUs are free but {eq_text(state, idle)} of them are "
        f"reserved ({who}); needs {eq_text(state, ask.demand[gpu_class])}, "
        f"{eq_text(state, max(0, usable))} unreserved"
    )
    details = {
        "gpu_class": gpu_class,
        "free": eq_json(state, free),
        "reserved_idle": eq_json(state, idle),
        "unreserved_free": eq_json(state, max(0, usable)),
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
            hint = f"reservation {rid} ends at {time_text(state.now, end)}"
    return PendingReason(ReasonCode.RESERVED_CAPACITY, message, details, hint)


def _lending_queue(state: State, ask: Ask, gpu_class: str) -> Queue | None:
    if ask.queue.preemption is PreemptionClass.PREEMPTIBLE and ask.queue.can_borrow:
        return None
    queue = borrowing_queue(state, ask, gpu_class)
    if queue is not None and queue.preemption is PreemptionClass.PREEMPTIBLE:
        return queue
    return None


def _shortage_causes(
    state: State, ask: Ask, gpu_class: str, pool: Pool | None, usable: int
) -> list[PendingReason]:
    """Not enough free capacity: say so, and whether unhealthy or maintenance nodes hold it."""
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    needed = shape.pods * shape.devices
    unit = UNIT_WORDS[ask.mode]
    pool_free = pool.free_devices if pool is not None else 0
    short_devices = max(0, needed - pool_free)
    short_eq = max(0, demand - max(usable, 0))
    matching = 0
    down: dict[str, list[tuple[str, int, int, str]]] = {"unhealthy": [], "maintenance": []}
    if pool is not None:
        for local, index in enumerate(pool.nodes):
            matching += 1
            if pool.eligible[local]:
                continue
            node = state.nodes[index]
            kind = "unhealthy" if not node.healthy else "maintenance"
            down[kind].append(
                (
                    node.name,
                    pool.free[local],
                    pool.free[local] * pool.unit[local],
                    _node_note(state, index),
                )
            )
    causes: list[PendingReason] = []
    extra: list[PendingReason] = []
    for kind, code in (
        ("maintenance", ReasonCode.MAINTENANCE),
        ("unhealthy", ReasonCode.UNHEALTHY),
    ):
        nodes = down[kind]
        if not nodes:
            continue
        devices = sum(n[1] for n in nodes)
        eq = sum(n[2] for n in nodes)
        first = nodes[0]
        what = "in maintenance" if kind == "maintenance" else "unhealthy"
        verb = "is" if len(nodes) == 1 else "are"
        message = (
            f"{len(nodes)} of the {matching} matching nodes {verb} {what} "
            f"({first[0]}: {first[3]}); they hold {devices} free {unit}s"
        )
        details = {
            "gpu_class": gpu_class,
            "matching_nodes": matching,
            "nodes": [n[0] for n in nodes],
            "free_on_them": devices,
            "unit": unit,
        }
        hint = ""
        if kind == "maintenance":
            backs = sorted(
                (state.nodes[state.node_index[n[0]]].maintenance_until, n[0])
                for n in nodes
                if state.nodes[state.node_index[n[0]]].maintenance_until is not None
            )
            if backs:
                when, name = backs[0]
                assert when is not None
                hint = f"{name} is expected back at {time_text(state.now, when)}"
        reason = PendingReason(code, message, details, hint)
        if devices >= short_devices and eq >= short_eq:
            causes.append(reason)
        else:
            extra.append(reason)
    code = (
        ReasonCode.MIG_PROFILE_UNAVAILABLE if ask.mode == MIG else ReasonCode.INSUFFICIENT_CAPACITY
    )
    causes.append(_shortage_reason(state, ask, gpu_class, pool, usable, code))
    return causes + extra


def _node_note(state: State, index: int) -> str:
    node = state.nodes[index]
    if not node.healthy:
        return node.health_reason or "unhealthy"
    note = node.maintenance_reason or node.maintenance.value
    if node.maintenance_until is not None:
        note += f", back {time_text(state.now, node.maintenance_until)}"
    return note


def _shortage_reason(
    state: State, ask: Ask, gpu_class: str, pool: Pool | None, usable: int, code: ReasonCode
) -> PendingReason:
    shape = ask.shapes[gpu_class]
    needed = shape.pods * shape.devices
    pool_free = pool.free_devices if pool is not None else 0
    nodes_with_free = 0
    if pool is not None:
        nodes_with_free = sum(
            1 for local, free in enumerate(pool.free) if pool.eligible[local] and free > 0
        )
    outside = _outside_eq(state, gpu_class)
    if ask.mode == MIG:
        what = f"{needed} × {ask.profile} {'slice' if needed == 1 else 'slices'} of {gpu_class}"
        free_text = f"{pool_free} free across {plural(nodes_with_free, 'node')}"
    elif ask.mode == TIME_SLICED:
        what = f"{plural(needed, 'time-sliced replica')} of {gpu_class}"
        free_text = f"{pool_free} free"
    else:
        what = f"{needed} {gpu_class} {'GPU' if needed == 1 else 'GPUs'}"
        free_text = f"{pool_free} free"
    message = f"needs {what}; {free_text}"
    if pool_free >= needed and ask.demand[gpu_class] > usable:
        message += (
            f" but only {eq_text(state, max(0, usable))} GPU-equivalents of {gpu_class} are free"
        )
    if outside:
        message += f" ({eq_text(state, outside)} used outside the portal)"
    details: dict[str, Any] = {
        "gpu_class": gpu_class,
        "requested": needed,
        "free": pool_free,
        "unit": UNIT_WORDS[ask.mode],
        "requested_gpu_eq": eq_json(state, ask.demand[gpu_class]),
        "free_gpu_eq": eq_json(state, max(0, usable)),
        "capacity_gpu_eq": eq_json(state, state.class_capacity[gpu_class]),
        "outside_gpu_eq": eq_json(state, outside),
    }
    if ask.mode == MIG:
        details["profile"] = ask.profile
        details["nodes_with_free"] = nodes_with_free
    hint = _alternative_capability_hint(state, ask, gpu_class) or _frees_hint(
        state, ask, gpu_class, pool
    )
    return PendingReason(code, message, details, hint)


def _outside_eq(state: State, gpu_class: str) -> int:
    return state.outside.get(gpu_class, 0)


def _alternative_capability_hint(state: State, ask: Ask, gpu_class: str) -> str:
    """A capability class this queue accepts whose matches have enough free capacity now."""
    from queues.admission.capability import resolve_capability

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
            shape = ask.shapes[gpu_class]
            own = state.holder_reservations(ask.job.team, ask.queue.name, name)
            if state.usable(name, CapacityKind.NOMINAL, None, False, own) >= demand and place(
                pool, shape
            ):
                return f"capability class `{capability.name}` would also match the free {name} GPUs"
    return ""


def _frees_hint(state: State, ask: Ask, gpu_class: str, pool: Pool | None) -> str:
    """When running jobs reaching their limits free enough devices of this pool."""
    if pool is None:
        return ""
    shape = ask.shapes[gpu_class]
    short = shape.pods * shape.devices - pool.free_devices
    if short <= 0:
        return ""
    memo_key = ("releases", id(pool), state.class_version[gpu_class])
    releases = state.memo.get(memo_key)
    if releases is None:
        releases = sorted(
            (
                alloc.end,
                sum(s.devices for s in alloc.spots if s.pool is pool and s.pool.eligible[s.local]),
            )
            for alloc in state.class_allocs[gpu_class].values()
        )
        state.memo[memo_key] = releases
    assert isinstance(releases, list)
    freed = 0
    for end, devices in releases:
        freed += devices
        if freed >= short:
            return (
                f"{plural(short, 'more ' + UNIT_WORDS[ask.mode])} free up by "
                f"{time_text(state.now, end)} "
                "as running jobs reach their runtime limits"
            )
    return ""


def _shape_cause(state: State, ask: Ask, gpu_class: str, pool: Pool) -> PendingReason:
    """Enough is free in total, but not in a shape the job can use."""
    shape = ask.shapes[gpu_class]
    free_nodes = [
        (local, free) for local, free in enumerate(pool.free) if pool.eligible[local] and free > 0
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
