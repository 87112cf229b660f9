"""Elastic capacity: node pools whose nodes take minutes to come (docs/cluster.md, "Node pools").

The planner itself knows only nodes. For a snapshot with node pools, ``elastic_plan`` shows it
the nodes that are not there yet as nodes that are out of service until they are expected Ready
(cordoned, back at the lead time's 90th percentile): the nodes being provisioned, and as many
nodes as the pool may still add ("possible" nodes, carrying a taint only the queues that may
scale the pool up tolerate). The planner's own rules then do the rest: nothing is admitted on
them now; the forecast starts jobs on them when they come, or on other nodes if GPUs free up
first, and notes which it starts there (``Plan.landings``). Here those jobs get the
``Provisioning`` reason in place of the causes about coming nodes, and the plan says how many
nodes to ask each pool for (``ScaleUp``): the possible nodes the forecast starts jobs on.

A queue's warm floor holds up to that many empty nodes of the class for it (less the nodes its
jobs run on), with a taint only that queue tolerates; the pool is asked for nodes to keep them.

Pure Python like the rest of the engine. For a snapshot without node pools none of this runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from queues.admission.plan import PendingStatus, Plan, ScaleUp
from queues.admission.pods import UNIT_WORDS
from queues.admission.reasons import (
    PendingReason,
    ReasonCode,
    ready_in_text,
    span_text,
    time_text,
)
from queues.admission.snapshot import (
    COMING_MARK,
    WARM_TAINT,
    JobId,
    MaintenanceState,
    Node,
    NodePool,
    PendingJob,
    Snapshot,
)
from queues.admission.state import node_mode

# Taints the planner sees on nodes that are not there yet or held warm; never put on a node.
SCALE_UP_TAINT = "gpuportal.io/scale-up-"
PROVISIONING_NOTE = "provisioning"
# The least a node already overdue is still expected to take.
OVERDUE_MARGIN = timedelta(minutes=1)

_SHORTAGE = frozenset(
    {
        ReasonCode.INSUFFICIENT_CAPACITY,
        ReasonCode.MIG_PROFILE_UNAVAILABLE,
        ReasonCode.FRAGMENTATION,
        ReasonCode.TOPOLOGY,
    }
)


@dataclass(slots=True)
class Coming:
    """A node not there yet: being provisioned (``requested``) or one the pool may add."""

    name: str
    pool: NodePool
    requested: bool
    ready: datetime  # expected (the lead time's median after it was asked for)
    ready_by: datetime  # nine times in ten (the 90th percentile)
    devices: int
    jobs: list[JobId] = field(default_factory=list)  # the forecast starts on it (``landings``)


@dataclass(slots=True)
class ElasticView:
    snapshot: Snapshot
    pools: tuple[NodePool, ...]
    coming: dict[str, Coming]
    warm_short: dict[str, int]  # per pool: warm nodes the floors want and no empty node gives


def elastic_plan(snapshot: Snapshot, fixed: Callable[..., Plan], **options: Any) -> Plan:
    """``fixed`` (the planner) on ``snapshot`` with its pools' coming nodes; see the module."""
    view = elastic_view(snapshot)
    plan = fixed(view.snapshot, **options)
    statuses, for_jobs = _provisioning_statuses(
        view, plan, estimated=options.get("estimates", True)
    )
    scale_up: tuple[ScaleUp, ...] | None = None
    if options.get("estimates", True) and not plan.partial:
        scale_up = _scale_up(view, for_jobs)
    return replace(plan, pending=statuses, scale_up=scale_up)


def device_count(node: Node) -> int:
    """Devices a job's pods ask for on ``node``: GPUs, MIG slices (of its largest profile) or
    time-slice replicas."""
    if node.mig:
        return max(slots.total for slots in node.mig)
    return node.gpus * max(1, node.time_slice_replicas)


def elastic_view(snapshot: Snapshot) -> ElasticView:
    """The snapshot the planner sees: warm nodes held, coming nodes added (see the module)."""
    now = snapshot.now
    nodes = list(snapshot.nodes)
    tolerations: dict[str, list[str]] = {}
    coming: dict[str, Coming] = {}
    warm_short: dict[str, int] = {}
    busy = _nodes_by_queue(snapshot)
    for pool in sorted(snapshot.node_pools, key=lambda p: p.name):
        warm_short[pool.name] = _hold_warm(snapshot, pool, nodes, busy, tolerations)
        for number, asked in enumerate(sorted(pool.provisioning), start=1):
            ready_by = max(asked + pool.lead_p90, now + OVERDUE_MARGIN)
            ready = min(max(asked + pool.lead_median, now), ready_by)
            # (named to sort after every node there, and before the possible nodes: of two
            # nodes free at once the planner takes the first by name, so a node there before
            # one not yet, and one already asked for before one not)
            name = f"{COMING_MARK}{pool.name}{COMING_MARK}asked-{number:03d}"
            coming[name] = Coming(name, pool, True, ready, ready_by, device_count(pool.template))
            nodes.append(_not_yet(pool, name, ready_by, ()))
        if pool.scale_up_queues:
            for queue in pool.scale_up_queues:
                tolerations.setdefault(queue, []).append(SCALE_UP_TAINT + pool.name)
            taint = (f"{SCALE_UP_TAINT}{pool.name}:NoSchedule",)
            for number in range(1, _possible(snapshot, pool, warm_short[pool.name]) + 1):
                name = f"{COMING_MARK}{pool.name}{COMING_MARK}new-{number:03d}"
                ready, ready_by = now + pool.lead_median, now + pool.lead_p90
                coming[name] = Coming(
                    name, pool, False, ready, ready_by, device_count(pool.template)
                )
                nodes.append(_not_yet(pool, name, ready_by, taint))
    queues = tuple(
        replace(q, tolerations=(*q.tolerations, *tolerations[q.name]))
        if q.name in tolerations
        else q
        for q in snapshot.queues
    )
    seen = replace(snapshot, nodes=tuple(nodes), queues=queues, node_pools=())
    pools = tuple(sorted(snapshot.node_pools, key=lambda p: p.name))
    return ElasticView(seen, pools, coming, warm_short)


def _not_yet(pool: NodePool, name: str, ready_by: datetime, taints: tuple[str, ...]) -> Node:
    return replace(
        pool.template,
        name=name,
        gpu_class=pool.gpu_class,
        taints=(*pool.template.taints, *taints),
        healthy=True,
        maintenance=MaintenanceState.CORDONED,
        maintenance_reason=PROVISIONING_NOTE,
        maintenance_until=ready_by,
        outside_gpu_eq=Fraction(0),
    )


def _possible(snapshot: Snapshot, pool: NodePool, warm_short: int) -> int:
    """Possible nodes shown: the pool's headroom, but no more than could ever be of use (one
    per waiting pod of a queue that may scale it up, plus the warm floors' shortfall)."""
    scaling = set(pool.scale_up_queues)
    pods = sum(job.pods for job in snapshot.pending if job.queue in scaling)
    return min(pool.headroom, pods + warm_short)


def _nodes_by_queue(snapshot: Snapshot) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for job in snapshot.running:
        found.setdefault(job.queue, set()).update(job.pods)
    return found


def _empty(node: Node, occupied: set[str]) -> bool:
    return (
        node.name not in occupied
        and node.healthy
        and node.maintenance is MaintenanceState.NONE
        and node.outside_gpu_eq == 0
        and not any(slots.outside for slots in node.mig)
    )


def _hold_warm(
    snapshot: Snapshot,
    pool: NodePool,
    nodes: list[Node],
    busy: Mapping[str, set[str]],
    tolerations: dict[str, list[str]],
) -> int:
    """Taint empty nodes of the pool's class for the queues with warm floors (in ``nodes``);
    returns how many the floors want that no empty node could give."""
    if not pool.warm_floors:
        return 0
    occupied = set().union(*busy.values()) if busy else set()
    free = [
        index
        for index, node in sorted(enumerate(nodes), key=lambda item: item[1].name)
        if node.gpu_class == pool.gpu_class and _empty(node, occupied)
    ]
    short = 0
    for queue, floor in sorted(pool.warm_floors):
        on = sum(1 for name in busy.get(queue, ()) if _class_of(snapshot, name) == pool.gpu_class)
        wanted = max(0, floor - on)
        tolerations.setdefault(queue, []).append(WARM_TAINT + queue)
        for _ in range(wanted):
            if not free:
                short += 1
                continue
            index = free.pop(0)
            node = nodes[index]
            nodes[index] = replace(node, taints=(*node.taints, f"{WARM_TAINT}{queue}:NoSchedule"))
    return short


def _class_of(snapshot: Snapshot, node_name: str) -> str | None:
    for node in snapshot.nodes:
        if node.name == node_name:
            return node.gpu_class
    return None


def warm_nodes(snapshot: Snapshot) -> dict[str, str]:
    """The nodes the warm floors hold empty, and for which queue (what the planner sees)."""
    view = elastic_view(snapshot)
    held: dict[str, str] = {}
    for node in view.snapshot.nodes:
        for taint in node.taints:
            if taint.startswith(WARM_TAINT):
                held[node.name] = taint[len(WARM_TAINT) :].split(":", 1)[0]
    return held


# --------------------------------------------------------------------- reasons and demand


def _provisioning_statuses(
    view: ElasticView, plan: Plan, *, estimated: bool
) -> tuple[tuple[PendingStatus, ...], dict[str, list[JobId]]]:
    """Every status of a job that starts on coming nodes with the ``Provisioning`` reason in
    place of its causes about them (or after its reasons when none names them); every other
    status without such causes (it keeps today's reasons); and, per pool, the jobs starting on
    nodes the pool is yet to be asked for.

    Which jobs start on coming nodes, the forecast's simulation says (``Plan.landings``). For
    the jobs it gives no nodes (every job of a plan without the forecast, and those it projects
    beyond its horizon), the coming nodes no simulated job starts on are packed in plan order
    with the jobs whose binding cause names them and whose estimate is not sooner."""
    jobs = {job.id: job for job in view.snapshot.pending}
    for coming in view.coming.values():
        coming.jobs = []
    landed: dict[JobId, tuple[datetime, list[Coming]]] = {}
    for job_id, start, names in plan.landings:
        nodes = [view.coming[name] for name in names if name in view.coming]
        for node in nodes:
            node.jobs.append(job_id)
        if nodes:
            landed[job_id] = (start, sorted(nodes, key=lambda c: (c.ready_by, c.name)))
    free = {name: 0 if coming.jobs else coming.devices for name, coming in view.coming.items()}
    for status in plan.pending:
        job = jobs.get(status.job_id)
        if job is None or (estimated and not status.estimated_start.projected):
            continue
        nodes = _packed(view, status, job, free)
        if nodes:
            landed[job.id] = (max(node.ready_by for node in nodes), nodes)
            for node in nodes:
                node.jobs.append(job.id)
    for_jobs: dict[str, list[JobId]] = {}
    for coming in view.coming.values():
        if not coming.requested and coming.jobs:
            for_jobs.setdefault(coming.pool.name, []).extend(coming.jobs)
    statuses = tuple(
        _status(view, status, jobs.get(status.job_id), landed.get(status.job_id), plan.now)
        for status in plan.pending
    )
    return statuses, for_jobs


def _packed(
    view: ElasticView, status: PendingStatus, job: PendingJob, free: dict[str, int]
) -> list[Coming]:
    """The coming nodes that take the job's pods, first fit on what ``free`` leaves of them
    (which it takes), of those named by its first cause about coming nodes when that cause
    binds (no shortage of the class named before it); none when the estimate starts it before
    any could come."""
    found = next(
        (
            (i, names)
            for i, r in enumerate(status.reasons)
            if (names := _about_coming(view, r)) is not None
        ),
        None,
    )
    if found is None:
        return []
    index, names = found
    gpu_class = status.reasons[index].details.get("gpu_class")
    if any(
        r.code in _SHORTAGE and r.details.get("gpu_class") == gpu_class
        for r in status.reasons[:index]
    ):
        return []
    nodes = sorted(
        (view.coming[name] for name in names), key=lambda c: (not c.requested, c.ready, c.name)
    )
    at = status.estimated_start.at
    if at is not None and at < min(node.ready_by for node in nodes):
        return []
    needed = max(1, job.gpus_per_pod)
    taken: list[Coming] = []
    for _ in range(max(1, job.pods)):
        for node in nodes:
            if free[node.name] - needed * taken.count(node) >= needed:
                taken.append(node)
                break
        else:
            return []
    for node in taken:
        free[node.name] -= needed
    distinct = {node.name: node for node in taken}
    return sorted(distinct.values(), key=lambda c: (c.ready_by, c.name))


def _about_coming(view: ElasticView, reason: PendingReason) -> list[str] | None:
    """The coming nodes a maintenance cause names, if it names only such nodes."""
    if reason.code is not ReasonCode.MAINTENANCE:
        return None
    names = reason.details.get("nodes") or []
    if names and all(name in view.coming for name in names):
        return list(names)
    return None


def _status(
    view: ElasticView,
    status: PendingStatus,
    job: PendingJob | None,
    landing: tuple[datetime, list[Coming]] | None,
    now: datetime,
) -> PendingStatus:
    if any(WARM_TAINT in r.message for r in status.reasons):
        status = replace(status, reasons=tuple(_warm_words(r) for r in status.reasons))
    about = [i for i, r in enumerate(status.reasons) if _about_coming(view, r) is not None]
    if landing is None or job is None:
        if not about:
            return status
        return replace(
            status, reasons=tuple(r for i, r in enumerate(status.reasons) if i not in about)
        )
    start, nodes = landing
    estimate = status.estimated_start
    cause = status.reasons[about[0]] if about else None
    reason = provisioning_reason(job, cause, nodes, now, start=start, latest=estimate.at or start)
    kept = [r for i, r in enumerate(status.reasons) if i not in about]
    kept.insert(about[0] if about else len(kept), reason)
    ready = max(n.ready for n in nodes)
    ready_by = max(n.ready_by for n in nodes)
    if estimate.at == ready_by and ready < ready_by:  # their arrival starts it
        likely = max(ready, now)
        estimate = replace(
            estimate,
            likely=likely,
            range_low=min(estimate.range_low or likely, likely),
            range_high=max(estimate.range_high or ready_by, ready_by),
        )
    return replace(status, reasons=tuple(kept), estimated_start=estimate)


_WARM = re.compile(re.escape(WARM_TAINT) + r"([a-z0-9.-]+):NoSchedule")
_TAINTS = re.compile(r"with taints queue (\S+) does not tolerate")


def _warm_words(reason: PendingReason) -> PendingReason:
    """A reason about the taints warm floors put (in the planner's view only) said as people
    know it: nodes held empty for another queue's warm floor."""
    if WARM_TAINT not in reason.message:
        return reason
    held = sorted(set(_WARM.findall(reason.message)))
    message = _TAINTS.sub("held empty for other queues' warm floors", reason.message)
    message = _WARM.sub(lambda m: f"kept warm for queue {m.group(1)}", message)
    hint = reason.hint
    if WARM_TAINT in hint or "tolerates the taints" in hint:
        hint = (
            f"the warm floor of queue {', '.join(held)} holds them until that queue runs there; "
            "the node pool adds nodes only for queues that may scale it up"
        )
    return PendingReason(reason.code, message, reason.details, hint)


def provisioning_reason(
    job: PendingJob,
    cause: PendingReason | None,
    nodes: Sequence[Coming],
    now: datetime,
    *,
    start: datetime,
    latest: datetime | None = None,
) -> PendingReason:
    """The forecast starts ``job`` at ``start`` (at the latest) on ``nodes``, not there yet.
    When their arrival starts it: ``needs 8 h100-80gb GPUs; a node is being provisioned for
    it, ready in about 6 min (p90 9 min)`` (``2 nodes are``, ready when the later is). When
    it starts there later (jobs ahead of it start there first, or it needs GPUs that free up
    elsewhere too): ``needs 16 h100-80gb GPUs; its estimate counts on a node being provisioned,
    ready in about 6 min (p90 9 min)``, the hint saying by when (``latest``: its estimate at
    the latest, ``start`` if not given). ``cause``: the reason it had about them, if any (its
    unit)."""
    node = nodes[-1]
    gpu_class = node.pool.gpu_class
    unit = str(cause.details.get("unit") or "") if cause is not None else ""
    unit = unit or UNIT_WORDS[node_mode(node.pool.template)]
    count = max(1, job.pods) * max(1, job.gpus_per_pod)
    noun = unit if count == 1 else f"{unit}s"
    ready_in = max(node.ready - now, timedelta(0))
    p90_in = max(node.ready_by - now, timedelta(0))
    when = ready_in_text(ready_in)
    arrival = start == node.ready_by
    several = len(nodes) > 1
    if arrival:
        coming = f"{len(nodes)} nodes are" if several else "a node is"
        what = f"{coming} being provisioned for it"
        hint = (
            "nothing to do: it starts once the new nodes are Ready, or sooner if GPUs free up"
            if several
            else "nothing to do: it starts on the new node once it is Ready, or sooner if GPUs "
            "free up"
        )
    else:
        what = "its estimate counts on " + (
            f"{len(nodes)} nodes being provisioned" if several else "a node being provisioned"
        )
        hint = (
            f"nothing to do: it starts there once enough GPUs free up after the new "
            f"{'nodes are' if several else 'node is'} Ready, at the latest "
            f"{time_text(latest or start)}"
        )
    message = f"needs {count} {gpu_class} {noun}; {what}, ready {when} (p90 {span_text(p90_in)})"
    details = {
        "gpu_class": gpu_class,
        "node_pool": node.pool.name,
        "requested": count,
        "unit": unit,
        "nodes": len(nodes),
        "starts_on_arrival": arrival,
        "already_requested": all(n.requested for n in nodes),
        "ready_at": node.ready.isoformat(),
        "ready_by": node.ready_by.isoformat(),
        "ready_in_seconds": int(ready_in.total_seconds()),
        "ready_p90_seconds": int(p90_in.total_seconds()),
    }
    return PendingReason(ReasonCode.PROVISIONING, message, details, hint)


def _scale_up(view: ElasticView, for_jobs: Mapping[str, list[JobId]]) -> tuple[ScaleUp, ...]:
    asks = []
    for pool in view.pools:
        jobs = for_jobs.get(pool.name, [])
        possible_used = sum(
            1 for c in view.coming.values() if c.pool is pool and not c.requested and c.jobs
        )
        spare = sum(
            1 for c in view.coming.values() if c.pool is pool and c.requested and not c.jobs
        )
        warm = min(max(0, view.warm_short.get(pool.name, 0) - spare), pool.headroom - possible_used)
        nodes = possible_used + max(0, warm)
        if nodes > 0:
            asks.append(ScaleUp(pool.name, nodes, tuple(sorted(set(jobs))), max(0, warm)))
    return tuple(asks)


# --------------------------------------------------------------------- scale-down


def scale_down(
    snapshot: Snapshot, empty_since: Mapping[str, datetime], *, held: AbstractSet[str] = frozenset()
) -> list[str]:
    """The pool nodes to remove now: empty (no job's pod, nothing outside the portal) for the
    pool's scale-down delay, never one ``held`` for a warm floor or below the warm floors or
    ``min_nodes``, and never so many that the class's in-service GPUs fall under what its
    reservations in force (or starting within the lead time) promise."""
    now = snapshot.now
    occupied: set[str] = set()
    for job in snapshot.running:
        occupied.update(job.pods)
    by_name = {node.name: node for node in snapshot.nodes}
    removed: list[str] = []
    for pool in sorted(snapshot.node_pools, key=lambda p: p.name):
        members = [by_name[n] for n in pool.members if n in by_name]
        left = len(members)
        capacity: Fraction = sum(
            (
                Fraction(n.gpus)
                for n in snapshot.nodes
                if n.gpu_class == pool.gpu_class
                and n.healthy
                and n.maintenance is MaintenanceState.NONE
            ),
            Fraction(0),
        )
        promised = sum(
            (
                Fraction(r.amount)
                for r in snapshot.reservations
                if r.gpu_class == pool.gpu_class
                and (r.active_at(now) or r.active_at(now + pool.lead_p90))
            ),
            Fraction(0),
        )
        for node in sorted(members, key=lambda n: n.name, reverse=True):
            since = empty_since.get(node.name)
            if left <= pool.min_nodes:
                break
            if (
                node.name in held
                or since is None
                or now - since < pool.scale_down_delay
                or not _empty(node, occupied)
            ):
                continue
            if capacity - node.gpus < promised:
                continue
            removed.append(node.name)
            left -= 1
            capacity -= node.gpus
    return removed
