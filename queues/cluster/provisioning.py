"""Asking a node pool for nodes, the way clusters do it: a ``ProvisioningRequest``
(``autoscaling.x-k8s.io/v1``, the cluster-autoscaler's API that Kueue's admission check uses)
that the pool's provisioner watches; and asking for an empty node's removal. The portal never
creates or deletes a Node itself.

The request names the pool in ``spec.parameters.nodePool`` and how many nodes in
``spec.podSets[0].count`` (one pod set of node-sized placeholder pods, one per node). The
provisioner reports in ``status.conditions`` (``Accepted``, ``Provisioned``, ``Failed``, the
cluster-autoscaler's condition types) and lists the nodes it added so far in
``status.provisioningClassDetails.nodes`` (comma-separated).

A node is asked to go by cordoning it and annotating it with ``REMOVE_ANNOTATION``; the pool's
provisioner drains and deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queues.cluster.adapter import PROVISIONING_GROUP, PROVISIONING_VERSION
from queues.cluster.manifests import MANAGED_BY

NODE_POOL_LABEL = "gpuportal.io/node-pool"
REMOVE_ANNOTATION = "gpuportal.io/scale-down"
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def provisioning_request(
    *, name: str, namespace: str, pool: str, nodes: int, gpus_per_node: int
) -> dict[str, Any]:
    """The ``ProvisioningRequest`` asking pool ``pool`` for ``nodes`` nodes."""
    return {
        "apiVersion": f"{PROVISIONING_GROUP}/{PROVISIONING_VERSION}",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, NODE_POOL_LABEL: pool},
        },
        "spec": {
            "provisioningClassName": PROVISIONING_CLASS,
            "podSets": [{"podTemplateRef": {"name": f"{pool}-node"}, "count": nodes}],
            "parameters": {"nodePool": pool, "gpusPerNode": str(gpus_per_node)},
        },
    }


@dataclass(frozen=True)
class ProvisioningStatus:
    """What the provisioner says of one request."""

    name: str
    nodes: tuple[str, ...]
    provisioned: bool
    failed: str | None  # the Failed condition's message, when it failed
    failed_at: datetime | None


def provisioning_status(raw: dict[str, Any]) -> ProvisioningStatus:
    status = raw.get("status") or {}
    details = status.get("provisioningClassDetails") or {}
    nodes = tuple(n for n in str(details.get("nodes") or "").split(",") if n)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    failed = conditions.get("Failed")
    provisioned = conditions.get("Provisioned")
    failed_at = None
    if failed is not None and failed.get("status") == "True":
        stamp = failed.get("lastTransitionTime")
        if stamp:
            failed_at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return ProvisioningStatus(
        name=raw["metadata"]["name"],
        nodes=nodes,
        provisioned=provisioned is not None and provisioned.get("status") == "True",
        failed=(failed.get("message") or failed.get("reason") or "failed")
        if failed is not None and failed.get("status") == "True"
        else None,
        failed_at=failed_at,
    )


def removal_patch() -> dict[str, Any]:
    """Cordon a node and ask its pool's provisioner to remove it."""
    return {
        "metadata": {"annotations": {REMOVE_ANNOTATION: "requested"}},
        "spec": {"unschedulable": True},
    }
