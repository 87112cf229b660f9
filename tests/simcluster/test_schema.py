"""Every object the simulated cluster writes is valid Kubernetes, by the API's own schema."""

from __future__ import annotations

import kubernetes_validate

from simcluster import ManualClock, SimCluster
from tests.sim import EXAMPLE_CLUSTER
from tests.simcluster.manifests import gpu_job

RESOURCES = ["nodes", "namespaces", "pods", "jobs", "events"]


def test_every_version_of_every_object_validates_strictly_against_kubernetes_1_33():
    cluster = SimCluster.from_file(EXAMPLE_CLUSTER, clock=ManualClock())
    cluster.create_namespace({"metadata": {"name": "team-nlp"}})
    cluster.create_job("team-nlp", gpu_job("gang", duration=30, indexed=True, pods=2))
    cluster.create_job("team-nlp", gpu_job("unschedulable", gpus=9))
    cluster.create_job("team-nlp", gpu_job("pull", image="example.com/does-not-exist:1"))
    cluster.create_job("team-nlp", gpu_job("deadline", deadline=10))
    cluster.create_job("team-nlp", gpu_job("fails", duration=5, exit_code=2))
    cluster.advance(3)
    cluster.create_foreign_pod(node="l4-01")
    cluster.set_node_health("h100-02", healthy=False, taint={"key": "x", "effect": "NoSchedule"})
    cluster.advance(40)
    cluster.delete_job("team-nlp", "deadline", propagation="Foreground")
    cluster.delete_job("team-nlp", "gang", propagation="Background")
    cluster.advance(30)

    versions = [change.object for change in cluster.store.changes_since(0, RESOURCES)]
    for obj in versions:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)

    kinds = {obj["kind"] for obj in versions}
    phases = {obj["status"].get("phase") for obj in versions if obj["kind"] == "Pod"}
    assert kinds == {"Node", "Namespace", "Pod", "Job", "Event"}
    assert phases == {"Pending", "Running", "Succeeded", "Failed"}
