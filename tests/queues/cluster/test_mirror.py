"""The watch-fed mirror: list once, follow changes, relist on 410, survive errors."""

from __future__ import annotations

import time

import pytest

from queues.cluster.adapter import Cluster
from queues.cluster.mirror import ClusterMirror


def eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture
def mirror(sim_cluster):
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    mirror = ClusterMirror(cluster).start()
    assert mirror.wait_synced(10)
    yield mirror
    mirror.stop()
    cluster.close()


def pod_names(mirror):
    return sorted(p["metadata"]["name"] for p in mirror.items("pods"))


def test_it_lists_then_follows_changes(sim_cluster, mirror):
    assert len(mirror.items("nodes")) == 18
    assert mirror.error() == ""

    pod = sim_cluster.create_foreign_pod(gpus=1, node="h100-01", name="notebook-1")

    assert eventually(lambda: "notebook-1" in pod_names(mirror))
    sim_cluster.core().delete_namespaced_pod(
        pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=0
    )
    assert eventually(lambda: "notebook-1" not in pod_names(mirror))


def test_a_410_relists_and_resumes(sim_cluster, mirror):
    follower = mirror.followers["pods"]
    before = follower.relists

    sim_cluster.expire_watches()
    sim_cluster.gone_next_watch(3)
    sim_cluster.create_foreign_pod(gpus=1, node="h100-02", name="notebook-2")

    assert eventually(lambda: "notebook-2" in pod_names(mirror))
    assert eventually(lambda: follower.relists > before)
    assert mirror.error() == ""


def test_errors_are_reported_until_the_cluster_answers_again(sim_cluster, mirror):
    sim_cluster.fail_requests(2, status=500, path="/nodes")
    sim_cluster.expire_watches()  # force the node follower to list again, into the failures
    sim_cluster.node_unhealthy("h100-03")

    assert eventually(lambda: "nodes:" in mirror.error(), timeout=10)
    assert eventually(lambda: mirror.error() == "", timeout=15)
    node = next(n for n in mirror.items("nodes") if n["metadata"]["name"] == "h100-03")
    assert any(
        c["type"] == "GPUHealthy" and c["status"] == "False" for c in node["status"]["conditions"]
    )


def test_facts_are_rebuilt_only_for_objects_that_changed(sim_cluster, mirror):
    from queues.cluster.pods import pod_facts

    built = []

    def counting(obj):
        built.append(obj["metadata"]["name"])
        return pod_facts(obj)

    for name, node in (("nb-1", "h100-01"), ("nb-2", "h100-02")):
        pod = sim_cluster.create_foreign_pod(gpus=1, node=node, name=name)
    assert eventually(lambda: {"nb-1", "nb-2"} <= set(pod_names(mirror)))
    first = {f.name: f for f in mirror.facts("pods", counting)}
    assert sorted(built) == pod_names(mirror)  # the first call reads every pod
    built.clear()

    assert {f.name: f for f in mirror.facts("pods", counting)} == first
    assert built == []  # nothing changed: nothing read again

    namespace = pod["metadata"]["namespace"]
    sim_cluster.core().delete_namespaced_pod("nb-1", namespace, grace_period_seconds=30)
    assert eventually(lambda: mirror.facts("pods", counting) and "nb-1" in built)
    now = {f.name: f for f in mirror.facts("pods", counting)}
    assert set(built) == {"nb-1"}  # the pod being deleted, and only it
    assert now["nb-1"] == pod_facts(
        next(p for p in mirror.items("pods") if p["metadata"]["name"] == "nb-1")
    )
    assert now["nb-1"] != first["nb-1"] and now["nb-2"] is first["nb-2"]
