"""Jobs through the official client: create, run, finish, fail, gangs, deletion."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from kubernetes import client

from tests.simcluster.manifests import A100, gpu_job

NS = "team-nlp"


@pytest.fixture
def cluster(sim_cluster):
    sim_cluster.core().create_namespace({"metadata": {"name": NS}})
    return sim_cluster


def pods_of(cluster, job: str) -> list[client.V1Pod]:
    return (
        cluster.core()
        .list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job}")
        .items
    )


def condition(job: client.V1Job, kind: str) -> client.V1JobCondition | None:
    return next((c for c in job.status.conditions or [] if c.type == kind), None)


def test_a_job_runs_on_the_requested_gpu_class_and_completes_with_real_timestamps(cluster):
    batch = cluster.batch()
    created_at = cluster.now()

    job = batch.create_namespaced_job(NS, gpu_job("job-1", gpus=8, duration=600))
    [pending] = pods_of(cluster, "job-1")
    cluster.advance(2)
    [running] = pods_of(cluster, "job-1")
    cluster.advance(600)
    done = batch.read_namespaced_job("job-1", NS)
    [finished] = pods_of(cluster, "job-1")

    assert job.spec.selector.match_labels == {
        "batch.kubernetes.io/controller-uid": job.metadata.uid
    }
    assert pending.status.phase == "Pending" and pending.spec.node_name == "h100-01"
    assert pending.metadata.owner_references[0].kind == "Job"
    assert running.status.phase == "Running"
    assert running.status.container_statuses[0].state.running.started_at == created_at + timedelta(
        seconds=2
    )
    terminated = finished.status.container_statuses[0].state.terminated
    assert finished.status.phase == "Succeeded"
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert terminated.finished_at - terminated.started_at == timedelta(seconds=600)
    assert done.status.succeeded == 1 and not done.status.active
    assert done.status.start_time == created_at
    assert done.status.completion_time == created_at + timedelta(seconds=602)
    assert condition(done, "Complete").status == "True"


def test_the_speed_factor_shortens_a_pods_run(sim_cluster_factory):
    fast = sim_cluster_factory(speed=60)
    fast.core().create_namespace({"metadata": {"name": NS}})

    fast.batch().create_namespaced_job(NS, gpu_job("hour", duration=3600))
    fast.advance(59)
    running = fast.batch().read_namespaced_job("hour", NS)
    fast.advance(2)
    job = fast.batch().read_namespaced_job("hour", NS)

    assert running.status.active == 1
    assert condition(job, "Complete") is not None
    assert job.status.completion_time - job.status.start_time <= timedelta(seconds=61)


def test_a_failing_container_fails_the_job_with_backoff_limit_exceeded(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("job-2", duration=30, exit_code=3))
    cluster.advance(32)

    job = cluster.batch().read_namespaced_job("job-2", NS)
    [pod] = pods_of(cluster, "job-2")

    terminated = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, terminated.exit_code, terminated.reason) == ("Failed", 3, "Error")
    assert job.status.failed == 1
    failed = condition(job, "Failed")
    assert (failed.reason, failed.message) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )


def test_a_failed_pod_is_replaced_while_the_backoff_limit_allows(cluster):
    cluster.batch().create_namespaced_job(
        NS, gpu_job("retry", duration=30, exit_code=1, backoff_limit=1)
    )
    cluster.advance(32)
    cluster.advance(10)

    phases = sorted(p.status.phase for p in pods_of(cluster, "retry"))

    assert phases == ["Failed", "Pending"]


def test_active_deadline_fails_the_job_and_stops_its_pods(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("slow", duration=3600, deadline=120, grace=30))

    cluster.advance(120)
    failing = batch.read_namespaced_job("slow", NS)
    [terminating] = pods_of(cluster, "slow")
    cluster.advance(30)
    failed = batch.read_namespaced_job("slow", NS)

    assert condition(failing, "FailureTarget").reason == "DeadlineExceeded"
    assert condition(failing, "Failed") is None
    assert failing.status.terminating == 1
    assert terminating.metadata.deletion_timestamp is not None
    assert pods_of(cluster, "slow") == []
    assert (condition(failed, "Failed").reason, condition(failed, "Failed").message) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )


def test_an_indexed_gang_gets_one_pod_per_index(cluster):
    cluster.batch().create_namespaced_job(
        NS, gpu_job("gang", gpus=8, pods=3, indexed=True, duration=100)
    )
    cluster.advance(2)

    pods = pods_of(cluster, "gang")
    indexes = sorted(
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods
    )
    labels = sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods)
    cluster.advance(100)
    job = cluster.batch().read_namespaced_job("gang", NS)

    assert indexes == labels == ["0", "1", "2"]
    assert sorted(p.spec.node_name for p in pods) == ["h100-01", "h100-02", "h100-03"]
    assert sorted(p.spec.hostname for p in pods) == ["gang-0", "gang-1", "gang-2"]
    assert {p.status.phase for p in pods} == {"Running"}
    assert job.status.completed_indexes == "0-2"
    assert condition(job, "Complete") is not None


def test_a_gang_larger_than_the_free_nodes_starts_only_partly(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("big", gpus=8, pods=5, indexed=True))

    phases = sorted((p.spec.node_name or "-") for p in pods_of(cluster, "big"))

    assert phases == ["-", "h100-01", "h100-02", "h100-03", "h100-04"]


def test_it_refuses_a_duplicate_job_and_a_missing_namespace(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("twice"))

    with pytest.raises(client.ApiException) as duplicate:
        batch.create_namespaced_job(NS, gpu_job("twice"))
    with pytest.raises(client.ApiException) as missing:
        batch.create_namespaced_job("team-nowhere", gpu_job("lost"))

    assert duplicate.value.status == 409
    assert 'jobs.batch \\"twice\\" already exists' in duplicate.value.body
    assert '"reason":"AlreadyExists"' in duplicate.value.body
    assert missing.value.status == 404
    assert 'namespaces \\"team-nowhere\\" not found' in missing.value.body


def test_it_refuses_an_invalid_job(cluster):
    manifest = gpu_job("bad")
    manifest["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "2"},
    }

    with pytest.raises(client.ApiException) as raised:
        cluster.batch().create_namespaced_job(NS, manifest)

    assert raised.value.status == 422
    assert '"reason":"Invalid"' in raised.value.body
    assert "spec.template.spec.restartPolicy" in raised.value.body
    assert "must be equal to nvidia.com/gpu limit of 1" in raised.value.body


def test_it_answers_400_for_a_body_that_is_not_json(cluster):
    request = urllib.request.Request(
        f"{cluster.url}/apis/batch/v1/namespaces/{NS}/jobs",
        data=b"{not json",
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {cluster.server.token}",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=5)

    status = json.loads(raised.value.read())
    assert raised.value.code == 400
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "BadRequest", 400)


def test_background_deletion_removes_the_job_and_lets_pods_terminate_gracefully(cluster):
    batch, core = cluster.batch(), cluster.core()
    batch.create_namespaced_job(
        NS, gpu_job("bg", gpus=8, grace=60, product=None, node_names=["h100-01"])
    )
    cluster.advance(2)

    deleted_at = cluster.now()
    batch.delete_namespaced_job("bg", NS, propagation_policy="Background")
    [terminating] = pods_of(cluster, "bg")
    blocked = batch.create_namespaced_job(
        NS, gpu_job("next", gpus=8, product=None, node_names=["h100-01"])
    )
    [waiting] = pods_of(cluster, "next")
    cluster.advance(60)
    [started] = pods_of(cluster, "next")

    with pytest.raises(client.ApiException) as gone:
        batch.read_namespaced_job("bg", NS)
    assert gone.value.status == 404
    assert terminating.metadata.deletion_timestamp == deleted_at + timedelta(seconds=60)
    assert terminating.metadata.deletion_grace_period_seconds == 60
    assert blocked.metadata.name == "next"
    assert waiting.spec.node_name is None
    assert "Insufficient nvidia.com/gpu" in waiting.status.conditions[0].message
    assert started.spec.node_name == "h100-01"
    assert pods_of(cluster, "bg") == []
    killing = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={terminating.metadata.name},reason=Killing"
    )
    assert [e.message for e in killing.items] == ["Stopping container main"]


def test_a_deleted_pod_ends_with_its_final_container_state(cluster):
    from kubernetes import watch

    core = cluster.core()
    cluster.batch().create_namespaced_job(NS, gpu_job("final", grace=5))
    cluster.advance(2)
    since = core.list_namespaced_pod(NS).metadata.resource_version
    cluster.batch().delete_namespaced_job("final", NS, propagation_policy="Background")
    cluster.advance(5)

    events = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod, NS, resource_version=since, timeout_seconds=2
    ):
        events.append(event)
        if event["type"] == "DELETED":
            stream.stop()

    gone = events[-1]["object"]
    terminated = gone.status.container_statuses[0].state.terminated
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert (gone.status.phase, terminated.exit_code) == ("Failed", 137)
    assert terminated.finished_at == cluster.now()


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("fg", grace=10))
    cluster.advance(2)

    batch.delete_namespaced_job("fg", NS, propagation_policy="Foreground")
    deleting = batch.read_namespaced_job("fg", NS)
    cluster.advance(10)

    assert deleting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in deleting.metadata.finalizers
    with pytest.raises(client.ApiException) as gone:
        batch.read_namespaced_job("fg", NS)
    assert gone.value.status == 404


def test_deletion_without_propagation_orphans_the_pods_and_warns(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("orphan"))

    _, _, headers = batch.delete_namespaced_job_with_http_info("orphan", NS)
    [pod] = pods_of(cluster, "orphan")

    assert "child pods are preserved" in headers["Warning"]
    assert pod.metadata.owner_references is None
    assert pod.metadata.deletion_timestamp is None


def test_terminating_pods_hold_their_gpus_until_gone(cluster):
    core = cluster.core()
    cluster.batch().create_namespaced_job(
        NS, gpu_job("holder", gpus=4, product=A100, node_names=["a100-01"], grace=600)
    )
    cluster.advance(2)
    [pod] = pods_of(cluster, "holder")

    core.delete_namespaced_pod(pod.metadata.name, NS)
    cluster.batch().create_namespaced_job(
        NS, gpu_job("wants-8", gpus=8, product=A100, node_names=["a100-01"])
    )
    [waiting] = pods_of(cluster, "wants-8")
    cluster.advance(600)
    [placed] = pods_of(cluster, "wants-8")

    assert waiting.status.phase == "Pending" and waiting.spec.node_name is None
    assert placed.spec.node_name == "a100-01"


def test_it_lists_jobs_by_label_across_namespaces(cluster):
    cluster.core().create_namespace({"metadata": {"name": "team-vision"}})
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("a", labels={"gpuportal.io/team": "nlp"}))
    batch.create_namespaced_job("team-vision", gpu_job("b", labels={"gpuportal.io/team": "vision"}))

    everything = batch.list_job_for_all_namespaces(label_selector="gpuportal.io/job")
    vision = batch.list_job_for_all_namespaces(label_selector="gpuportal.io/team=vision")
    in_nlp = batch.list_namespaced_job(NS)

    assert [j.metadata.name for j in everything.items] == ["a", "b"]
    assert [j.metadata.name for j in vision.items] == ["b"]
    assert [j.metadata.name for j in in_nlp.items] == ["a"]
