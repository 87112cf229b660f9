"""Node pools in the reconcile: what the pools' provisioners did, the engine's view of the pools,
and acting on the plan's scale-ups and on scale-downs (docs/cluster.md, "Node pools").

Each cycle, when the policy has node pools:

* ``pools_sync`` (before the snapshot) reads the portal's ``ProvisioningRequest`` objects,
  records each node that came (its lead time: asked for → Ready), marks a failed request failed
  and retries it as a new request for the nodes it did not bring, and keeps each pool node's
  bookkeeping: since when it is empty, how long it sat ready with nothing on it (warm idle), and
  whether it is gone after a removal.
* ``engine_pools`` gives the snapshot each pool with its members, the nodes being provisioned
  and the lead times (learned from history once ``LEARN_AFTER`` nodes came).
* ``pools_apply`` (after the plan) asks pools for the nodes the plan wants (``Plan.scale_up``)
  and asks for the removal of nodes the engine's ``scale_down`` allows.

Without node pools none of this reads or writes anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from queues import admission as engine
from queues.admission.elastic import scale_down, warm_nodes
from queues.cluster.adapter import Cluster, ClusterRejected
from queues.cluster.provisioning import (
    NODE_POOL_LABEL,
    provisioning_request,
    provisioning_status,
    removal_patch,
)
from queues.models import (
    GPU_HOLDING_STATES,
    Job,
    Node,
    NodePool,
    NodeProvisioning,
    PoolNode,
    ProvisioningState,
    WarmHold,
)
from queues.reconcile.facts import ClusterView

logger = logging.getLogger(__name__)

# A failed request is retried this many times (each a new request) before it is left failed.
MAX_ATTEMPTS = 3


def pools_exist() -> bool:
    return NodePool.objects.active().exists()


# --- lead times ------------------------------------------------------------------------------


def lead_times(pool: NodePool) -> tuple[timedelta, timedelta, int]:
    """See ``NodePool.lead_times``."""
    return pool.lead_times()


# --- the engine's view -----------------------------------------------------------------------


def pool_members(pool_name: str, nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if (n.labels or {}).get(NODE_POOL_LABEL) == pool_name]


def removed_node_names() -> set[str]:
    """Pool nodes removed by a scale-down: the snapshot leaves them out (the mirror keeps a node
    the cluster stopped reporting, as unhealthy)."""
    return set(PoolNode.objects.filter(removed_at__isnull=False).values_list("name", flat=True))


def template_node(pool: NodePool) -> engine.Node:
    labels = pool.node_labels or {}
    return engine.Node(
        name=f"{pool.name}-template",
        gpu_class=pool.gpu_class.name,
        gpus=pool.node_gpus,
        mig=tuple(
            engine.MigSlots(profile=profile, total=int(total))
            for profile, total in sorted((pool.node_mig_layout or {}).items())
        ),
        time_slice_replicas=pool.node_time_slice_replicas,
        rack=str(labels.get("rack", "")),
        network_domain=str(labels.get("network_domain", "")),
    )


def engine_pools(nodes: Sequence[Node], *, now: datetime) -> tuple[engine.NodePool, ...]:
    """Every active pool as the engine sees it (``nodes``: the nodes in the snapshot). A pool
    whose last request failed for good (refused, or out of retries) less than its lead time's
    p90 ago is asked for nothing meanwhile: its queues keep today's reasons, and the next cycle
    does not ask again at once."""
    result = []
    pools = (
        NodePool.objects.active().select_related("gpu_class").prefetch_related("queue_terms__queue")
    )
    for pool in pools.order_by("name"):
        median, p90, _ = lead_times(pool)
        coming: list[datetime] = []
        for row in NodeProvisioning.objects.filter(pool=pool, state=ProvisioningState.PROVISIONING):
            coming += [row.requested_at] * max(0, row.nodes - len(row.nodes_ready))
        terms = [t for t in pool.queue_terms.all() if t.queue.active]
        resting = not coming and _failed_lately(pool, p90, now=now)
        result.append(
            engine.NodePool(
                name=pool.name,
                gpu_class=pool.gpu_class.name,
                max_nodes=pool.max_nodes,
                min_nodes=pool.min_nodes,
                template=template_node(pool),
                lead_median=median,
                lead_p90=p90,
                members=tuple(n.name for n in pool_members(pool.name, nodes)),
                provisioning=tuple(sorted(coming)),
                scale_up_queues=()
                if resting
                else tuple(sorted(t.queue.name for t in terms if t.may_scale_up)),
                warm_floors=tuple(
                    sorted((t.queue.name, t.warm_nodes) for t in terms if t.warm_nodes)
                ),
                scale_down_delay=pool.scale_down_delay,
            )
        )
    return tuple(result)


def _failed_lately(pool: NodePool, backoff: timedelta, *, now: datetime) -> bool:
    latest = NodeProvisioning.objects.filter(pool=pool).order_by("-requested_at", "-id").first()
    return (
        latest is not None
        and latest.state == ProvisioningState.FAILED
        and latest.finished_at is not None
        and now - latest.finished_at < max(backoff, timedelta(minutes=1))
    )


# --- what the provisioners did ---------------------------------------------------------------


def pools_sync(cluster: Cluster, view: ClusterView, *, now: datetime) -> None:
    """Read the provisioners' answers and keep the pool nodes' bookkeeping (module docstring)."""
    pools = {p.name: p for p in NodePool.objects.all()}
    if not any(p.active for p in pools.values()):
        if pools:  # the policy took its pools away: no floor holds a node any more
            WarmHold.objects.filter(ended_at__isnull=True).update(ended_at=now)
        return
    listing = cluster.list_provisioning_requests(settings.CLUSTER_PROVISIONING_NAMESPACE)
    answers = {raw["metadata"]["name"]: provisioning_status(raw) for raw in listing.items}
    reported = {facts.name: facts for facts in view.nodes}
    requested_for: dict[str, NodeProvisioning] = {}
    for row in NodeProvisioning.objects.filter(state=ProvisioningState.PROVISIONING).order_by(
        "requested_at", "id"
    ):
        answer = answers.get(row.object_name)
        if answer is None:
            # created in the database, not (yet) in the cluster: a crash between the two, or
            # the cluster did not answer: ask again (a create that finds it is success)
            _create_object(cluster, row, now=now)
            continue
        came = [name for name in answer.nodes if name in reported][: row.nodes]
        for name in came:
            requested_for[name] = row
        if came != row.nodes_ready:
            row.nodes_ready = came
        if answer.failed is not None:
            row.state = ProvisioningState.FAILED
            row.failure = answer.failed[:500]
            row.finished_at = answer.failed_at or now
            _retry(cluster, row, now=now)
        elif len(came) >= row.nodes:
            row.state = ProvisioningState.PROVISIONED
            row.finished_at = now
        row.save()
    _pool_nodes_sync(pools, reported, requested_for, now=now)


def _retry(cluster: Cluster, failed: NodeProvisioning, *, now: datetime) -> None:
    missing = failed.nodes - len(failed.nodes_ready)
    if missing <= 0 or failed.attempt >= MAX_ATTEMPTS or not failed.pool.active:
        return
    retry = NodeProvisioning.objects.create(
        pool=failed.pool,
        object_name=_object_name(failed.pool.name),
        nodes=missing,
        requested_at=now,
        attempt=failed.attempt + 1,
        retry_of=failed,
        for_jobs=failed.for_jobs,
        warm=min(failed.warm, missing),
    )
    logger.warning(
        "provisioning %s for pool %s failed (%s); retrying as %s",
        failed.object_name,
        failed.pool.name,
        failed.failure,
        retry.object_name,
    )
    _create_object(cluster, retry, now=now)


def _pool_nodes_sync(
    pools: dict[str, NodePool],
    reported: Mapping[str, object],
    requested_for: dict[str, NodeProvisioning],
    *,
    now: datetime,
) -> None:
    rows = {r.name: r for r in PoolNode.objects.all()}
    busy = _busy_nodes()
    for node in Node.objects.filter(name__in=list(reported)).select_related("gpu_class"):
        pool = pools.get((node.labels or {}).get(NODE_POOL_LABEL, ""))
        if pool is None:
            continue
        row = rows.pop(node.name, None)
        asked = requested_for.get(node.name)
        if row is None:
            row = PoolNode(
                pool=pool,
                name=node.name,
                gpus=node.gpu_count,
                provisioning=asked,
                requested_at=asked.requested_at if asked is not None else None,
                ready_at=now,
            )
        elif row.removed_at is not None:  # the name came back: a new node
            row.removed_at = row.removal_requested_at = None
            row.ready_at, row.idle_seconds, row.idle_checked_at = now, 0.0, None
            row.provisioning = asked
            row.requested_at = asked.requested_at if asked is not None else None
        empty = (
            node.name not in busy
            and node.healthy
            and not node.maintenance
            and not any((node.outside_devices or {}).values())
        )
        if empty:
            if row.empty_since is None:
                row.empty_since = now
            elif row.idle_checked_at is not None:
                row.idle_seconds += max(0.0, (now - row.idle_checked_at).total_seconds())
        else:
            row.empty_since = None
        row.idle_checked_at = now if empty else None
        row.save()
    for gone in rows.values():
        if gone.removed_at is None and gone.name not in reported:
            gone.removed_at = now
            gone.empty_since = gone.idle_checked_at = None
            gone.save(update_fields=["removed_at", "empty_since", "idle_checked_at"])


def _busy_nodes() -> set[str]:
    busy: set[str] = set()
    for nodes in Job.objects.filter(state__in=GPU_HOLDING_STATES).values_list("nodes", flat=True):
        busy.update(nodes or [])
    for nodes in Job.objects.filter(terminating=True).values_list("nodes", flat=True):
        busy.update(nodes or [])
    return busy


# --- acting on the plan ----------------------------------------------------------------------


def _object_name(pool: str) -> str:
    return f"gpuportal-{pool}-{uuid.uuid4().hex[:10]}"


def _create_object(cluster: Cluster, row: NodeProvisioning, *, now: datetime) -> None:
    """Create the request's object; one the cluster refuses (no such pool, no
    ProvisioningRequest API) fails for good, with the cluster's words."""
    try:
        cluster.create_provisioning_request(
            provisioning_request(
                name=row.object_name,
                namespace=settings.CLUSTER_PROVISIONING_NAMESPACE,
                pool=row.pool.name,
                nodes=row.nodes,
                gpus_per_node=row.pool.node_gpus,
            )
        )
    except ClusterRejected as exc:
        row.state = ProvisioningState.FAILED
        row.failure = f"the cluster refused the request: {exc}"[:500]
        row.finished_at = now
        row.attempt = max(row.attempt, MAX_ATTEMPTS)
        row.save(update_fields=["state", "failure", "finished_at", "attempt"])
        logger.warning("node pool %s: %s", row.pool.name, row.failure)


def pools_apply(
    cluster: Cluster, snapshot: engine.Snapshot, plan: engine.Plan, *, now: datetime
) -> None:
    """Ask pools for the nodes the plan wants and for the removal of nodes empty long enough."""
    if not snapshot.node_pools:
        return
    pools = {p.name: p for p in NodePool.objects.active()}
    for ask in plan.scale_up or ():
        pool = pools.get(ask.pool)
        if pool is None:
            continue
        with transaction.atomic():
            row = NodeProvisioning.objects.create(
                pool=pool,
                object_name=_object_name(pool.name),
                nodes=ask.nodes,
                requested_at=now,
                for_jobs=list(ask.for_jobs),
                warm=ask.warm,
            )
        logger.info(
            "asking node pool %s for %d node(s) (%s) for jobs %s",
            pool.name,
            ask.nodes,
            row.object_name,
            list(ask.for_jobs),
        )
        _create_object(cluster, row, now=now)
    _scale_down(cluster, snapshot, plan, now=now)


def _scale_down(
    cluster: Cluster, snapshot: engine.Snapshot, plan: engine.Plan, *, now: datetime
) -> None:
    rows = {r.name: r for r in PoolNode.objects.filter(removed_at__isnull=True, pool__active=True)}
    asked = {name for name, r in rows.items() if r.removal_requested_at is not None}
    # a job admitted by this very plan holds its nodes, though the snapshot predates it
    taken = {node for a in plan.admissions for node in a.nodes}
    empty_since = {
        name: r.empty_since
        for name, r in rows.items()
        if r.empty_since is not None and name not in taken and name not in asked
    }
    held = set(warm_nodes(snapshot))
    kept = _still_there(snapshot, asked)
    for name in scale_down(kept, empty_since, held=held):
        try:
            cluster.patch_node(name, removal_patch())
        except ClusterRejected as exc:
            if exc.status != 404:
                raise
        PoolNode.objects.filter(name=name).update(removal_requested_at=now)
        logger.info("asking for the removal of node %s, empty since %s", name, empty_since[name])


def _still_there(snapshot: engine.Snapshot, going: set[str]) -> engine.Snapshot:
    """The snapshot without nodes already asked to go: the floors count only nodes that stay."""
    if not going:
        return snapshot
    pools = tuple(
        replace(p, members=tuple(m for m in p.members if m not in going))
        for p in snapshot.node_pools
    )
    nodes = tuple(n for n in snapshot.nodes if n.name not in going)
    return replace(snapshot, nodes=nodes, node_pools=pools)


def warm_holds_sync(snapshot: engine.Snapshot, *, now: datetime) -> None:
    """Record which nodes the warm floors hold empty now (the engine's ``warm_nodes``): close
    the open holds of nodes no longer held (or held for another queue) and open the new ones,
    all at ``now``, in one transaction. Chargeback's warm-idle split reads these rows."""
    held = warm_nodes(snapshot) if snapshot.node_pools else {}
    with transaction.atomic():
        open_rows = {
            name: (pk, queue)
            for pk, name, queue in WarmHold.objects.filter(ended_at__isnull=True).values_list(
                "pk", "node__name", "queue"
            )
        }
        stale = [pk for name, (pk, queue) in open_rows.items() if held.get(name) != queue]
        if stale:
            WarmHold.objects.filter(pk__in=stale, ended_at__isnull=True).update(ended_at=now)
        fresh = {
            name: queue
            for name, queue in held.items()
            if open_rows.get(name, (None, None))[1] != queue
        }
        if not fresh:
            return
        classes = {
            name: (pk, class_id)
            for pk, name, class_id in Node.objects.filter(
                name__in=list(fresh), gpu_class__isnull=False
            ).values_list("pk", "name", "gpu_class_id")
            if class_id is not None
        }
        WarmHold.objects.bulk_create(
            [
                WarmHold(
                    node_id=classes[name][0],
                    gpu_class_id=classes[name][1],
                    queue=queue,
                    started_at=now,
                )
                for name, queue in sorted(fresh.items())
                if name in classes
            ],
            ignore_conflicts=True,
        )
