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


def test_the_watch_says_when_gpus_are_given_back_and_keeps_how_a_deleted_pod_ended(sim_cluster):
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    freed: list[float] = []
    mirror = ClusterMirror(cluster, on_freed=lambda: freed.append(time.monotonic())).start()
    try:
        assert mirror.wait_synced(10)
        sim_cluster.create_foreign_pod(gpus=1, node="h100-01", name="short", duration_seconds=5)
        sim_cluster.advance(3)  # the image pulled: it runs
        assert eventually(
            lambda: any(
                (p.get("status") or {}).get("phase") == "Running" for p in mirror.items("pods")
            )
        )
        time.sleep(0.3)
        assert freed == []  # a pod starting gives nothing back

        sim_cluster.advance(6)
        assert eventually(lambda: len(freed) == 1)  # it ended

        sim_cluster.core().delete_namespaced_pod("short", "ml-sandbox", grace_period_seconds=0)
        assert eventually(lambda: len(freed) == 2)  # it went
        gone = {p["metadata"]["name"]: p for p in mirror.gone("pods")}
        assert gone["short"]["status"]["phase"] == "Succeeded"
        assert "short" not in pod_names(mirror)
    finally:
        mirror.stop()
        cluster.close()


@pytest.mark.parametrize(
    ("kind", "event", "before", "after", "frees"),
    [
        ("pods", "MODIFIED", "Running", "Succeeded", True),
        ("pods", "MODIFIED", "Running", "Failed", True),
        ("pods", "MODIFIED", "Pending", "Running", False),
        ("pods", "MODIFIED", "Succeeded", "Succeeded", False),
        ("pods", "ADDED", None, "Pending", False),
        ("pods", "DELETED", "Running", "Running", True),
        ("nodes", "MODIFIED", None, None, False),
    ],
)
def test_which_pod_events_give_gpus_back(kind, event, before, after, frees):
    from queues.cluster.mirror import frees_gpus

    def pod(phase):
        return None if phase is None else {"status": {"phase": phase}}

    assert frees_gpus(kind, event, pod(before), pod(after) or {}) is frees


@pytest.mark.parametrize(
    ("event", "before", "after", "frees"),
    [
        ("MODIFIED", "Running", "Succeeded", False),
        ("MODIFIED", "Running", "Failed", False),
        ("DELETED", "Running", "Running", True),
    ],
)
def test_a_jobs_pod_that_ends_leaves_it_to_its_job_to_say_so(event, before, after, frees):
    """A pod of a Job: its GPUs come back when the Job completes or fails (the next test), a
    moment after the pod ends; one that is deleted gives them back at once."""
    from queues.cluster.mirror import frees_gpus

    def pod(phase):
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}
        return {"metadata": {"ownerReferences": [owner]}, "status": {"phase": phase}}

    assert frees_gpus("pods", event, pod(before), pod(after)) is frees


@pytest.mark.parametrize(
    ("before", "after", "frees"),
    [([], ["Complete"], True), ([], ["Failed"], True), (["Complete"], ["Complete"], False)],
)
def test_a_job_that_completes_or_fails_gives_gpus_back_once(before, after, frees):
    from queues.cluster.mirror import frees_gpus

    def job(conditions):
        return {"status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}

    assert frees_gpus("jobs", "MODIFIED", job(before), job(after)) is frees


def job_manifest_for(job_id: int) -> dict:
    from queues.cluster.manifests import JOB_ID_LABEL, MANAGED_BY

    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"gpuportal-job-{job_id}",
            "namespace": "default",
            "labels": {JOB_ID_LABEL: str(job_id), "app.kubernetes.io/managed-by": MANAGED_BY},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }


def job_names(mirror):
    return [j["metadata"]["name"] for j in mirror.items("jobs")]


def test_a_job_this_process_created_is_there_before_the_watch_says_so(sim_cluster):
    """A cycle right after the one that created a Job must not take it for deleted while its
    ADDED event is on the way: the mirror counts what its own client created until the watch
    (or a list) reports it, and never brings back one that went."""
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    mirror = ClusterMirror(cluster)  # not started: no watch reports anything yet
    try:
        assert cluster.create_job(job_manifest_for(7)) is True

        assert job_names(mirror) == ["gpuportal-job-7"]
        mirror.start()
        assert mirror.wait_synced(10)
        assert job_names(mirror) == ["gpuportal-job-7"]  # listed: once, not twice
        assert mirror.followers["jobs"].expected == {}
        sim_cluster.batch().delete_namespaced_job("gpuportal-job-7", "default")
        assert eventually(lambda: job_names(mirror) == [])
        assert cluster.create_job(job_manifest_for(8)) is True
        assert eventually(lambda: mirror.followers["jobs"].expected == {})
        assert job_names(mirror) == ["gpuportal-job-8"]
    finally:
        mirror.stop()
        cluster.close()
