"""The simulated node provisioner: what a cluster-autoscaler (or Karpenter, or a cloud's node
pool) does with a ``ProvisioningRequest`` (``autoscaling.x-k8s.io/v1``).

A request names its pool in ``spec.parameters.nodePool`` and how many nodes in
``spec.podSets[*].count``. The provisioner accepts it at once (condition ``Accepted``), adds each
node after a lead time drawn from a log-normal around the pool's median with its 90th
percentile (GPU nodes spend minutes on drivers, the GPU Operator, image pulls, MIG), lists the
nodes added so far in ``status.provisioningClassDetails.nodes``, and sets ``Provisioned`` when
all came. With the pool's ``failure_rate`` (or a fault armed with ``provisioning_failure``) a
request fails instead: ``Failed`` with a message, and the nodes it had not brought never come.
Draws come from one seeded random generator, so a test with a manual clock replays exactly.

A node annotated ``gpuportal.io/scale-down`` (the portal's removal request) is deleted once no
pod holds anything on it.

All functions run under the cluster's lock (``SimCluster`` calls them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from simcluster.clock import rfc3339
from simcluster.errors import already_exists, invalid, not_found
from simcluster.nodes import PoolSpec, pool_node_spec
from simcluster.objects import build_node, new_uid

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

RESOURCE = "provisioningrequests"
KIND = "ProvisioningRequest"
API_VERSION = "autoscaling.x-k8s.io/v1"
REMOVE_ANNOTATION = "gpuportal.io/scale-down"
FAILURE_MESSAGE = (
    "node {node} did not become Ready: GPU driver initialization timed out (simulated)"
)
Z90 = 1.2815515655446004  # the standard normal's 90th percentile


def lead_seconds(cluster: SimCluster, pool: PoolSpec) -> float:
    """One node's lead time: log-normal with the pool's median and 90th percentile."""
    if pool.lead_p90 <= pool.lead_median:
        return pool.lead_median
    sigma = math.log(pool.lead_p90 / pool.lead_median) / Z90
    return pool.lead_median * math.exp(cluster.provision_random.gauss(0.0, sigma))


def create_request(
    cluster: SimCluster, namespace: str, body: Any, *, dry_run: bool = False
) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
        raise invalid(KIND, "", "autoscaling.x-k8s.io", [("metadata", "Required value")])
    name = str(body["metadata"].get("name") or "")
    spec = body.get("spec") or {}
    pool_name = str((spec.get("parameters") or {}).get("nodePool") or "")
    count = sum(int(s.get("count") or 0) for s in spec.get("podSets") or [])
    problems = []
    if not name:
        problems.append(("metadata.name", "Required value"))
    if pool_name not in cluster.pools:
        problems.append(
            ("spec.parameters.nodePool", f'Invalid value: "{pool_name}": no such node pool')
        )
    if count <= 0:
        problems.append(("spec.podSets", "Invalid value: the pod sets must count at least 1"))
    if problems:
        raise invalid(KIND, name, "autoscaling.x-k8s.io", problems)
    cluster._require_namespace(namespace)
    if cluster.store.get(RESOURCE, namespace, name) is not None:
        raise already_exists(RESOURCE, name, "autoscaling.x-k8s.io")
    stamp = rfc3339(cluster._moment)
    obj = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            **body["metadata"],
            "name": name,
            "namespace": namespace,
            "uid": new_uid(),
            "creationTimestamp": stamp,
            "generation": 1,
        },
        "spec": spec,
        "status": {
            "conditions": [_condition("Accepted", "Accepted", "the request was accepted", stamp)],
            "provisioningClassDetails": {"nodes": ""},
        },
    }
    if dry_run:
        return obj
    stored = cluster.store.put(RESOURCE, obj)
    pool = cluster.pools[pool_name]
    key = f"{namespace}/{name}"
    fails = cluster.provisioning_failures_armed > 0 or (
        pool.failure_rate > 0 and cluster.provision_random.random() < pool.failure_rate
    )
    if cluster.provisioning_failures_armed > 0:
        cluster.provisioning_failures_armed -= 1
    leads = sorted(lead_seconds(cluster, pool) for _ in range(count))
    if fails:
        # the first node comes, the rest never do: the request fails when the last was due
        for index, seconds in enumerate(leads[: count // 2]):
            cluster._after(seconds, "provision", key, index)
        cluster._after(leads[-1], "provision-fail", key, count)
    else:
        for index, seconds in enumerate(leads):
            cluster._after(seconds, "provision", key, index)
    return stored


def _condition(kind: str, reason: str, message: str, stamp: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
    }


def _request(cluster: SimCluster, key: str) -> dict[str, Any] | None:
    namespace, name = key.split("/", 1)
    return cluster.store.get(RESOURCE, namespace, name)


def _failed(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Failed" for c in obj["status"].get("conditions") or [])


def provision_node(cluster: SimCluster, key: str) -> None:
    """One node of request ``key`` is Ready."""
    obj = _request(cluster, key)
    if obj is None or _failed(obj):
        return
    pool_name = obj["spec"]["parameters"]["nodePool"]
    pool = cluster.pools[pool_name]
    cluster.pool_counters[pool_name] = cluster.pool_counters.get(pool_name, 0) + 1
    name = f"{pool_name}-{cluster.pool_counters[pool_name]:03d}"
    add_node(cluster, pool, name)
    status = obj["status"]
    added = [n for n in str(status["provisioningClassDetails"].get("nodes") or "").split(",") if n]
    added.append(name)
    status = {**status, "provisioningClassDetails": {"nodes": ",".join(added)}}
    wanted = sum(int(s.get("count") or 0) for s in obj["spec"].get("podSets") or [])
    if len(added) >= wanted:
        stamp = rfc3339(cluster._moment)
        status["conditions"] = [
            *status["conditions"],
            _condition("Provisioned", "Provisioned", f"{len(added)} node(s) are Ready", stamp),
        ]
    cluster.store.put(RESOURCE, {**obj, "status": status})


def fail_request(cluster: SimCluster, key: str) -> None:
    obj = _request(cluster, key)
    if obj is None:
        return
    stamp = rfc3339(cluster._moment)
    pool_name = obj["spec"]["parameters"]["nodePool"]
    message = FAILURE_MESSAGE.format(node=f"{pool_name}-new")
    status = {
        **obj["status"],
        "conditions": [
            *obj["status"]["conditions"],
            _condition("Failed", "ProvisioningFailed", message, stamp),
        ],
    }
    cluster.store.put(RESOURCE, {**obj, "status": status})


def add_node(cluster: SimCluster, pool: PoolSpec, name: str) -> dict[str, Any]:
    number = len(cluster._node_numbers)
    cluster._node_numbers[name] = number
    built = build_node(pool_node_spec(pool, name), number, cluster._moment)
    node = cluster.store.put("nodes", built)
    cluster._node_used[name] = {}
    cluster._node_infos[name] = cluster._node_info(node)
    cluster._capacity_changed(name)
    cluster._schedule_dirty = True
    return node


def removal_asked(node: dict[str, Any]) -> bool:
    return REMOVE_ANNOTATION in (node["metadata"].get("annotations") or {})


def remove_when_empty(cluster: SimCluster, name: str) -> None:
    """Delete node ``name`` if nothing runs on it; look again in a simulated minute if not."""
    node = cluster.store.get("nodes", "", name)
    if node is None or not removal_asked(node):
        return
    if any(run.node == name and run.finished_at is None for run in cluster._runs.values()):
        cluster._after(60.0, "scale-down", name)
        return
    cluster.store.remove("nodes", "", name)
    cluster._node_used.pop(name, None)
    cluster._node_infos.pop(name, None)
    cluster._schedule_dirty = True


def delete_request(cluster: SimCluster, namespace: str, name: str) -> dict[str, Any]:
    obj = cluster.store.remove(RESOURCE, namespace, name)
    if obj is None:
        raise not_found(RESOURCE, name, "autoscaling.x-k8s.io")
    return obj
