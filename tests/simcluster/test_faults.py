"""Each injectable fault, as the official client experiences it."""

from __future__ import annotations

import json
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch

from tests.simcluster.manifests import H100, gpu_job

NS = "team-nlp"


@pytest.fixture
def cluster(sim_cluster):
    sim_cluster.core().create_namespace({"metadata": {"name": NS}})
    return sim_cluster


def only_pod(cluster, job: str) -> client.V1Pod:
    [pod] = (
        cluster.core()
        .list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job}")
        .items
    )
    return pod


def test_the_next_requests_fail_with_500_then_recover(cluster):
    core = cluster.core()
    cluster.fail_requests(2, path="^/api/v1/nodes$")

    errors = []
    for _ in range(2):
        with pytest.raises(client.ApiException) as raised:
            core.list_node()
        errors.append(raised.value)
    core.read_node("h100-01")  # other paths are not affected
    nodes = core.list_node()

    assert [e.status for e in errors] == [500, 500]
    assert json.loads(errors[0].body)["reason"] == "InternalError"
    assert len(nodes.items) == 18


def test_a_forbidden_fault_answers_403_for_the_matching_verb(cluster):
    cluster.fail_requests(
        status=403,
        method="POST",
        message='jobs.batch is forbidden: User "portal" cannot create resource',
    )

    with pytest.raises(client.ApiException) as raised:
        cluster.batch().create_namespaced_job(NS, gpu_job("denied"))

    assert raised.value.status == 403
    assert json.loads(raised.value.body)["reason"] == "Forbidden"
    assert cluster.batch().list_namespaced_job(NS).items == []


def test_a_slow_answer_trips_the_client_timeout_after_the_create_happened(cluster):
    cluster.delay_requests(1.0, method="POST", path="/jobs$", after=True)

    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        cluster.batch().create_namespaced_job(NS, gpu_job("slow"), _request_timeout=0.2)

    assert cluster.batch().read_namespaced_job("slow", NS).metadata.name == "slow"


def test_a_slow_answer_before_handling_times_out_reads(cluster):
    cluster.delay_requests(1.0, count=4, path="^/api/v1/nodes$")

    with pytest.raises(urllib3.exceptions.HTTPError):
        cluster.core().list_node(_request_timeout=0.2)


def test_gone_on_the_next_watch_raises_410(cluster):
    core = cluster.core()
    since = core.list_node().metadata.resource_version
    cluster.gone_next_watch()

    with pytest.raises(client.ApiException) as raised:
        for _ in watch.Watch().stream(core.list_node, resource_version=since, timeout_seconds=1):
            pass

    assert raised.value.status == 410


def test_expiring_watches_makes_every_earlier_resource_version_too_old(cluster):
    core = cluster.core()
    since = core.list_node().metadata.resource_version
    cluster.expire_watches()

    with pytest.raises(client.ApiException) as raised:
        for _ in watch.Watch().stream(core.list_node, resource_version=since):
            pass

    assert raised.value.status == 410


def test_a_node_turning_unhealthy_is_a_watch_event(cluster):
    core = cluster.core()
    since = core.list_node().metadata.resource_version
    cluster.node_unhealthy(
        "h100-02", reason="XIDErrors", message="XID 79 on GPU 3", label_value="xid-errors"
    )

    stream = watch.Watch()
    for event in stream.stream(core.list_node, resource_version=since, timeout_seconds=2):
        node = event["object"]
        stream.stop()

    health = next(c for c in node.status.conditions if c.type == "GPUHealthy")
    assert (event["type"], node.metadata.name) == ("MODIFIED", "h100-02")
    assert (health.status, health.reason, health.message) == (
        "False",
        "XIDErrors",
        "XID 79 on GPU 3",
    )
    assert node.metadata.labels["nvidia.com/gpu.health"] == "xid-errors"

    healed = cluster.node_healthy("h100-02")
    assert "nvidia.com/gpu.health" not in healed["metadata"]["labels"]


def test_an_unhealthy_node_can_also_be_tainted(cluster):
    taint = {"key": "nvidia.com/gpu.unhealthy", "value": "ecc", "effect": "NoSchedule"}
    cluster.node_unhealthy("h100-01", taint=taint)
    cluster.batch().create_namespaced_job(NS, gpu_job("avoid", gpus=8, node_names=["h100-01"]))

    message = only_pod(cluster, "avoid").status.conditions[0].message

    assert message.startswith(
        "0/18 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu.unhealthy: ecc}"
    )


def test_an_image_that_does_not_exist_fails_to_pull_then_backs_off(cluster):
    core = cluster.core()
    cluster.batch().create_namespaced_job(
        NS, gpu_job("pull", image="registry.example.com/team/does-not-exist:1")
    )
    cluster.advance(2)
    first = only_pod(cluster, "pull")
    cluster.advance(1)
    backing_off = only_pod(cluster, "pull")

    waiting = first.status.container_statuses[0].state.waiting
    assert first.status.phase == "Pending"
    assert waiting.reason == "ErrImagePull"
    assert (
        'failed to pull and unpack image "registry.example.com/team/does-not-exist:1"'
        in waiting.message
    )
    assert backing_off.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    events = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={first.metadata.name},reason=Failed"
    )
    assert [e.message for e in events.items][-2:] == [
        "Error: ErrImagePull",
        "Error: ImagePullBackOff",
    ]
    with pytest.raises(client.ApiException) as logs:
        core.read_namespaced_pod_log(first.metadata.name, NS)
    assert "trying and failing to pull image" in logs.value.body


def test_an_injected_image_pattern_fails_to_pull(cluster):
    cluster.fail_image_pulls("pytorch:broken")
    cluster.batch().create_namespaced_job(
        NS, gpu_job("pattern", image="nvcr.io/nvidia/pytorch:broken")
    )
    cluster.advance(2)

    assert (
        only_pod(cluster, "pattern").status.container_statuses[0].state.waiting.reason
        == "ErrImagePull"
    )


def test_an_oom_kill_ends_the_pod_with_137_and_fails_the_job(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("oom", duration=600))
    cluster.advance(2)
    pod = only_pod(cluster, "oom")

    cluster.oom_kill(NS, pod.metadata.name)
    killed = only_pod(cluster, "oom")
    job = cluster.batch().read_namespaced_job("oom", NS)

    terminated = killed.status.container_statuses[0].state.terminated
    assert (killed.status.phase, terminated.reason, terminated.exit_code) == (
        "Failed",
        "OOMKilled",
        137,
    )
    assert job.status.conditions[-1].type == "Failed"
    [event] = (
        cluster.core()
        .list_namespaced_event(
            NS, field_selector=f"involvedObject.name={pod.metadata.name},reason=OOMKilled"
        )
        .items
    )
    assert (
        event.message == "Container main was OOM-killed (exit code 137): memory limit 16Gi exceeded"
    )


def test_an_oom_annotation_kills_the_pod_at_the_end_of_its_run(cluster):
    cluster.batch().create_namespaced_job(
        NS, gpu_job("oom-later", duration=30, annotations={"sim.gpuportal.io/oom-kill": "true"})
    )
    cluster.advance(32)

    terminated = only_pod(cluster, "oom-later").status.container_statuses[0].state.terminated

    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)


def test_a_job_deleted_out_of_band_takes_its_pods_with_it(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("kubectl", grace=30))
    cluster.advance(2)

    cluster.delete_job_out_of_band(NS, "kubectl")
    terminating = only_pod(cluster, "kubectl")
    cluster.advance(30)

    with pytest.raises(client.ApiException) as gone:
        cluster.batch().read_namespaced_job("kubectl", NS)
    assert gone.value.status == 404
    assert terminating.metadata.deletion_timestamp is not None
    assert cluster.core().list_namespaced_pod(NS).items == []


def test_a_foreign_gpu_pod_holds_gpus_the_portal_cannot_use(cluster):
    foreign = cluster.create_foreign_pod(node="h100-01", gpus=4)
    cluster.batch().create_namespaced_job(NS, gpu_job("blocked", gpus=8, node_names=["h100-01"]))
    cluster.advance(3600)

    pod = cluster.core().read_namespaced_pod(foreign["metadata"]["name"], "ml-sandbox")
    blocked = only_pod(cluster, "blocked")

    assert pod.status.phase == "Running" and pod.spec.node_name == "h100-01"
    assert "gpuportal.io/job" not in pod.metadata.labels and not pod.metadata.owner_references
    assert blocked.spec.node_name is None


def test_faults_can_be_injected_over_http(cluster):
    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{cluster.url}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {cluster.server.token}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    post("/sim/faults", {"kind": "http_error", "status": 503, "path": "/api/v1/nodes"})
    with pytest.raises(client.ApiException) as raised:
        cluster.core().list_node()
    pod = post(
        "/sim/faults",
        {"kind": "foreign_pod", "gpus": 2, "resource": "nvidia.com/gpu", "node": "l4-02"},
    )
    state = post("/sim/clock", {"advance": 5})

    assert raised.value.status == 503
    assert pod["spec"]["nodeName"] == "l4-02"
    l4 = next(n for n in state["nodes"] if n["name"] == "l4-02")
    assert l4["resources"]["nvidia.com/gpu"] == {"allocatable": "4", "used": "2"}


def test_a_portal_job_can_be_created_after_faults_are_cleared(cluster):
    cluster.fail_requests(5)
    cluster.clear_faults()

    assert (
        cluster.batch().create_namespaced_job(NS, gpu_job("fine", product=H100)).metadata.name
        == "fine"
    )
