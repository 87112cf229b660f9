"""The node pass: the cluster's nodes → the Node mirror rows (only what changed is written)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from portal.formatting import format_datetime
from queues.cluster.nodes import NodeFacts
from queues.cluster.pods import devices_held
from queues.models import (
    GPU_HOLDING_STATES,
    EventKind,
    GpuClass,
    Job,
    JobState,
    Node,
)
from queues.rates import gpu_amount
from queues.reconcile.jobs import job_transition
from queues.reconcile.view import ClusterView, CycleReport


def nodes_sync(view: ClusterView, *, now: datetime) -> None:
    """Mirror every node; a node the cluster no longer reports stays, marked unhealthy."""
    classes = {g.product: g for g in GpuClass.objects.all()}
    use = devices_held(view.pods)
    existing = {n.name: n for n in Node.objects.all()}
    changed: list[Node] = []
    created: list[Node] = []
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
            continue
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


def _outside_gpu_eq(
    outside: dict[str, int], facts: NodeFacts, gpu_class: GpuClass | None
) -> Decimal:
    total = Fraction(outside.get("gpu", 0), facts.time_slice_replicas)
    for profile, count in outside.items():
        if profile != "gpu" and gpu_class is not None and profile in gpu_class.mig_profiles:
            total += count * gpu_class.mig_share(profile)
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
        "id", "state", "nodes"
    )
    for job in holding:
        drained = sorted(set(job.nodes) & set(overdue))
        if not drained:
            continue
        reason, deadline = overdue[drained[0]]
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind=EventKind.PREEMPTED,
            now=now,
            message=f"node {', '.join(drained)} is drained for maintenance"
            f"{f' ({reason})' if reason else ''} and its deadline "
            f"{format_datetime(deadline)} has passed",
            details={"maintenance_nodes": drained},
            terminating=True,
        ):
            report.preempted.append(job.pk)
