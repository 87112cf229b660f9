"""Pods: selectors, logs and events through the official client."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.simcluster.manifests import L4, gpu_job

NS = "team-speech"


@pytest.fixture
def cluster(sim_cluster):
    core = sim_cluster.core()
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespace({"metadata": {"name": "team-search"}})
    batch = sim_cluster.batch()
    batch.create_namespaced_job(
        NS, gpu_job("short", product=L4, duration=30, labels={"gpuportal.io/team": "speech"})
    )
    batch.create_namespaced_job(
        NS, gpu_job("long", product=L4, duration=3600, labels={"gpuportal.io/team": "speech"})
    )
    batch.create_namespaced_job(
        "team-search",
        gpu_job("other", product=L4, duration=3600, labels={"gpuportal.io/team": "search"}),
    )
    sim_cluster.advance(2)
    return sim_cluster


def names(pods) -> list[str]:
    return sorted(p.metadata.labels["batch.kubernetes.io/job-name"] for p in pods.items)


def test_it_lists_pods_by_label_and_field_selectors(cluster):
    core = cluster.core()
    cluster.advance(30)

    speech = core.list_pod_for_all_namespaces(label_selector="gpuportal.io/team=speech")
    either = core.list_pod_for_all_namespaces(label_selector="gpuportal.io/job in (short,other)")
    running = core.list_pod_for_all_namespaces(field_selector="status.phase=Running")
    bound = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
    on_node = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={running.items[0].spec.node_name}"
    )
    in_ns = core.list_namespaced_pod(NS, field_selector="status.phase!=Running")
    by_name = core.list_namespaced_pod(
        NS, field_selector=f"metadata.name={in_ns.items[0].metadata.name}"
    )

    assert names(speech) == ["long", "short"]
    assert names(either) == ["other", "short"]
    assert names(running) == ["long", "other"]
    assert names(bound) == ["long", "other", "short"]
    assert names(on_node) == ["long", "other", "short"]  # bin-packed onto one L4 node
    assert names(in_ns) == ["short"] and names(by_name) == ["short"]


def test_it_refuses_an_unsupported_field_selector(cluster):
    with pytest.raises(client.ApiException) as raised:
        cluster.core().list_pod_for_all_namespaces(field_selector="spec.foo=bar")

    assert raised.value.status == 400
    assert "field label not supported: spec.foo" in raised.value.body


def test_it_reads_a_pod_and_answers_404_for_a_missing_one(cluster):
    core = cluster.core()
    [pod] = core.list_namespaced_pod(NS, label_selector="gpuportal.io/job=long").items

    read = core.read_namespaced_pod(pod.metadata.name, NS)
    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_pod("nope", NS)

    assert read.metadata.uid == pod.metadata.uid
    assert read.status.host_ip and read.status.pod_ip and read.status.qos_class == "Guaranteed"
    assert raised.value.status == 404


def test_logs_grow_with_run_time_and_honour_tail_lines(cluster):
    core = cluster.core()
    [pod] = core.list_namespaced_pod(NS, label_selector="gpuportal.io/job=short").items
    cluster.advance(30)

    full = core.read_namespaced_pod_log(pod.metadata.name, NS)
    tail = core.read_namespaced_pod_log(pod.metadata.name, NS, tail_lines=2)
    stamped = core.read_namespaced_pod_log(pod.metadata.name, NS, tail_lines=1, timestamps=True)

    assert full.startswith("[sim] container main started: nvcr.io/nvidia/pytorch:24.05-py3\n")
    assert "visible GPUs: 1 x NVIDIA-L4" in full
    assert tail == "step 100: loss=2.4078 throughput=1207 samples/s\n[sim] done: exit code 0\n"
    assert stamped.endswith("Z [sim] done: exit code 0\n") and stamped[:4].isdigit()


def test_logs_of_a_pod_that_has_not_started_are_a_400(sim_cluster):
    core = sim_cluster.core()
    core.create_namespace({"metadata": {"name": NS}})
    sim_cluster.batch().create_namespaced_job(NS, gpu_job("fresh", product=L4))
    [pod] = core.list_namespaced_pod(NS).items

    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_pod_log(pod.metadata.name, NS)
    with pytest.raises(client.ApiException) as wrong:
        core.read_namespaced_pod_log(pod.metadata.name, NS, container="sidecar")

    assert raised.value.status == 400
    assert "is waiting to start: ContainerCreating" in raised.value.body
    assert wrong.value.status == 400


def test_pod_events_tell_the_kubelets_story(cluster):
    core = cluster.core()
    [pod] = core.list_namespaced_pod(NS, label_selector="gpuportal.io/job=short").items

    events = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod.metadata.name},involvedObject.kind=Pod"
    )

    assert [(e.reason, e.type) for e in events.items] == [
        ("Scheduled", "Normal"),
        ("Pulling", "Normal"),
        ("Pulled", "Normal"),
        ("Created", "Normal"),
        ("Started", "Normal"),
    ]
    started = events.items[-1]
    assert started.involved_object.field_path == "spec.containers{main}"
    assert started.source.host == pod.spec.node_name and started.count == 1
    assert started.first_timestamp == started.last_timestamp


def test_job_events_can_be_selected_cluster_wide(cluster):
    core = cluster.core()
    cluster.advance(30)

    job_events = core.list_event_for_all_namespaces(field_selector="involvedObject.kind=Job")
    in_search = core.list_event_for_all_namespaces(
        field_selector="involvedObject.kind=Job,involvedObject.namespace=team-search"
    )

    reasons = [(e.involved_object.name, e.reason) for e in job_events.items]
    assert ("short", "SuccessfulCreate") in reasons and ("short", "Completed") in reasons
    assert {e.involved_object.name for e in in_search.items} == {"other"}
    assert all(e.source.component == "job-controller" for e in job_events.items)


def test_a_deadline_is_an_event_on_the_job(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("late", product=L4, deadline=60, grace=0))
    cluster.advance(60)

    [event] = (
        cluster.core()
        .list_namespaced_event(
            NS, field_selector="involvedObject.name=late,reason=DeadlineExceeded"
        )
        .items
    )

    assert (event.type, event.message) == (
        "Warning",
        "Job was active longer than specified deadline",
    )


def test_a_pod_deleted_by_name_goes_after_its_grace_period(cluster):
    core = cluster.core()
    [pod] = core.list_namespaced_pod("team-search").items

    deleting = core.delete_namespaced_pod(pod.metadata.name, "team-search", grace_period_seconds=5)
    cluster.advance(5)

    assert deleting.metadata.deletion_grace_period_seconds == 5
    assert [p.metadata.name for p in core.list_namespaced_pod("team-search").items] != [
        pod.metadata.name
    ]


def test_a_pod_created_with_a_node_name_skips_the_scheduler_or_is_rejected(sim_cluster):
    core = sim_cluster.core()
    core.create_namespace({"metadata": {"name": NS}})

    def bare(name: str, node: str, gpus: int) -> dict:
        container = {
            "name": "c",
            "image": "busybox:1",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
        }
        return {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [container]},
        }

    core.create_namespaced_pod(NS, bare("direct", "l4-01", 4))
    core.create_namespaced_pod(NS, bare("too-big", "l4-02", 8))
    sim_cluster.advance(2)
    direct = core.read_namespaced_pod("direct", NS)
    rejected = core.read_namespaced_pod("too-big", NS)

    assert (direct.spec.node_name, direct.status.phase) == ("l4-01", "Running")
    assert (
        core.list_namespaced_event(
            NS, field_selector="involvedObject.name=direct,reason=Scheduled"
        ).items
        == []
    )
    assert (rejected.status.phase, rejected.status.reason) == ("Failed", "OutOfnvidia.com/gpu")
    assert rejected.status.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 0, capacity: 4"
    )
