"""The node pass: the cluster's nodes → the Node mirror rows (only what changed is written)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db import transaction

from portal.formatting import format_datetime
from queues.admission.state import work_since_checkpoint
from queues.cluster.nodes import NodeFacts
from queues.cluster.pods import devices_held
from queues.models import (
    GPU_HOLDING_STATES,
    EventKind,
    GpuClass,
    Job,
    JobState,
    Node,
    NodeState,
    NodeStateInterval,
)
from queues.rates import gpu_amount
from queues.reconcile.facts import ClusterView, CycleReport
from queues.reconcile.jobs import job_transition


def nodes_sync(view: ClusterView, *, now: datetime) -> None:
    """Mirror every node; a node the cluster no longer reports stays, marked unhealthy."""
    classes = {g.product: g for g in GpuClass.objects.all()}
    use = devices_held(view.pods)
    existing = {n.name: n for n in Node.objects.all()}
    changed: list[Node] = []
    created: list[Node] = []
    reported: list[Node] = []
    seen: list[int] = []
    fields = [
        "gpu_class",
        "product",
        "gpu_count",
        "mig_layout",
        "time_slice_replicas",
        "rack",
        "network_domain",
        "labels",
        "taints",
        "healthy",
        "health_reason",
        "maintenance",
        "maintenance_reason",
        "maintenance_until",
        "maintenance_deadline",
        "gpus_used_outside",
        "outside_devices",
        "cpu_millicores",
        "memory_mib",
    ]
    for facts in view.nodes:
        outside = dict(sorted(use[facts.name].outside.items())) if facts.name in use else {}
        gpu_class = classes.get(facts.product)
        values = {
            # The id, not the object: comparing objects would load every node's class.
            "gpu_class_id": gpu_class.pk if gpu_class is not None else None,
            "product": facts.product,
            "gpu_count": facts.gpu_count,
            "mig_layout": facts.mig_layout,
            "time_slice_replicas": facts.time_slice_replicas,
            "rack": facts.rack,
            "network_domain": facts.network_domain,
            "labels": facts.labels,
            "taints": facts.taints,
            "healthy": facts.healthy,
            "health_reason": facts.health_reason[:300],
            "maintenance": facts.maintenance,
            "maintenance_reason": facts.maintenance_reason[:300],
            "maintenance_until": facts.maintenance_until,
            "maintenance_deadline": facts.maintenance_deadline,
            "gpus_used_outside": _outside_gpu_eq(outside, facts, gpu_class),
            "outside_devices": outside,
            "cpu_millicores": facts.cpu_millicores,
            "memory_mib": facts.memory_mib,
            "last_seen_at": now,
        }
        node = existing.pop(facts.name, None)
        if node is None:
            created.append(Node(name=facts.name, **values))
            reported.append(created[-1])
            continue
        reported.append(node)
        seen.append(node.pk)
        values.pop("last_seen_at")
        if any(getattr(node, key) != value for key, value in values.items()):
            for key, value in values.items():
                setattr(node, key, value)
            changed.append(node)
    for gone in existing.values():
        if gone.healthy or gone.health_reason != "not reported by the cluster":
            gone.healthy = False
            gone.health_reason = "not reported by the cluster"
            changed.append(gone)
    Node.objects.bulk_create(created)
    # Only what changed is written; most cycles change no node at all.
    Node.objects.bulk_update(changed, fields, batch_size=500)
    Node.objects.filter(pk__in=seen).update(last_seen_at=now)
    # The reported nodes as just written (read back, they were a third of this pass at 2,000
    # nodes; bulk_create gave the new ones their keys).
    node_states_sync(nodes=[n for n in reported if n.gpu_class_id is not None], now=now)


def node_state_amounts(node: Node, gpu_class: GpuClass) -> dict[str, Fraction]:
    """A mirrored node's GPUs by state, in exact GPU-equivalents: all of them in its state
    (unhealthy before maintenance before in service) but what pods the portal did not create
    hold, which is ``outside`` whatever the state."""
    outside = _outside_fraction(node.outside_devices, node.time_slice_replicas, gpu_class)
    outside = min(outside, Fraction(node.gpu_count))
    if not node.healthy:
        state = NodeState.UNHEALTHY
    elif node.maintenance:
        state = NodeState.MAINTENANCE
    else:
        state = NodeState.AVAILABLE
    amounts = {str(state): Fraction(node.gpu_count) - outside, str(NodeState.OUTSIDE): outside}
    return {key: value for key, value in amounts.items() if value > 0}


def node_states_sync(*, nodes: list[Node], now: datetime) -> None:
    """Close the open node-state intervals that no longer match what ``nodes`` show and open the
    ones that do, all at ``now`` (one instant ends one and starts the next: no gap, no overlap).

    ``nodes`` are the nodes the cluster reports; every other node's open intervals close (a node
    that left the cluster holds no capacity). One transaction: a crash leaves the old intervals
    open and the next cycle switches them at its own instant; the one-open-row-per-node-and-state
    constraint keeps a rerun from opening twice."""
    classes = {g.pk: g for g in GpuClass.objects.all()}
    wanted = {
        (node.pk, state): (node.gpu_class_id, amount)
        for node in nodes
        if node.gpu_class_id in classes
        for state, amount in node_state_amounts(node, classes[node.gpu_class_id]).items()
    }
    with transaction.atomic():
        stale = []
        open_rows = NodeStateInterval.objects.filter(ended_at__isnull=True).values_list(
            "pk", "node_id", "state", "gpu_class_id", "amount_numerator", "amount_denominator"
        )
        for pk, node_id, state, class_id, numerator, denominator in open_rows:
            match = wanted.get((node_id, state))
            if match == (class_id, Fraction(numerator, denominator)):
                wanted.pop((node_id, state))
            else:
                stale.append(pk)
        if stale:
            NodeStateInterval.objects.filter(pk__in=stale, ended_at__isnull=True).update(
                ended_at=now
            )
        NodeStateInterval.objects.bulk_create(
            [
                NodeStateInterval(
                    node_id=node_id,
                    gpu_class_id=class_id,
                    state=state,
                    amount_numerator=amount.numerator,
                    amount_denominator=amount.denominator,
                    started_at=now,
                )
                for (node_id, state), (class_id, amount) in wanted.items()
            ],
            ignore_conflicts=True,
        )


def _outside_fraction(
    outside: dict[str, int], replicas: int, gpu_class: GpuClass | None
) -> Fraction:
    total = Fraction(outside.get("gpu", 0), replicas)
    for profile, count in outside.items():
        if profile != "gpu" and gpu_class is not None and profile in gpu_class.mig_profiles:
            total += count * gpu_class.mig_share(profile)
    return total


def _outside_gpu_eq(
    outside: dict[str, int], facts: NodeFacts, gpu_class: GpuClass | None
) -> Decimal:
    total = _outside_fraction(outside, facts.time_slice_replicas, gpu_class)
    return gpu_amount(total)


def maintenance_preempt(*, now: datetime, report: CycleReport) -> None:
    """Work still running on a drained node whose deadline has passed is preempted the normal
    way (terminating, then back to pending with an event); before the deadline it may finish."""
    overdue: dict[str, tuple[str, datetime]] = {}
    for name, reason, deadline in (
        Node.objects.exclude(maintenance="")
        .filter(maintenance_deadline__lte=now)
        .values_list("name", "maintenance_reason", "maintenance_deadline")
    ):
        if deadline is not None:
            overdue[name] = (reason, deadline)
    if not overdue:
        return
    holding = Job.objects.filter(state__in=GPU_HOLDING_STATES, terminating=False).only(
        "id", "state", "nodes", "started_at", "last_checkpoint_at", "checkpoint_interval"
    )
    for job in holding:
        drained = sorted(set(job.nodes) & set(overdue))
        if not drained:
            continue
        reason, deadline = overdue[drained[0]]
        lost = work_since_checkpoint(
            started_at=job.started_at,
            last_checkpoint=job.last_checkpoint_at,
            checkpoint_interval=job.checkpoint_interval,
            now=now,
        )
        # Said as a preemption by the plan says it (queues/reconcile/plan.py).
        loss = (
            f"; about {int(lost.total_seconds() // 60)} min of work lost since its last checkpoint"
            if job.started_at is not None
            else ""
        )
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind=EventKind.PREEMPTED,
            now=now,
            message=f"node {', '.join(drained)} is drained for maintenance"
            f"{f' ({reason})' if reason else ''} and its deadline "
            f"{format_datetime(deadline)} has passed{loss}",
            details={
                "maintenance_nodes": drained,
                "lost_work_seconds": int(lost.total_seconds()),
            },
            terminating=True,
        ):
            report.preempted.append(job.pk)
