"""The resources the simulated API server serves, and how their URLs and kinds are named."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """One REST resource: ``pods`` is kind ``Pod`` in group ``""`` (core), version ``v1``."""

    name: str
    kind: str
    group: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


RESOURCES: dict[str, Resource] = {
    "nodes": Resource("nodes", "Node", "", namespaced=False, short_names=("no",)),
    "namespaces": Resource("namespaces", "Namespace", "", namespaced=False, short_names=("ns",)),
    "pods": Resource("pods", "Pod", "", namespaced=True, short_names=("po",)),
    "events": Resource("events", "Event", "", namespaced=True, short_names=("ev",)),
    "secrets": Resource("secrets", "Secret", "", namespaced=True),
    "jobs": Resource("jobs", "Job", "batch", namespaced=True),
    # the cluster-autoscaler's custom resource (simcluster.provisioner answers it)
    "provisioningrequests": Resource(
        "provisioningrequests", "ProvisioningRequest", "autoscaling.x-k8s.io", namespaced=True
    ),
}
