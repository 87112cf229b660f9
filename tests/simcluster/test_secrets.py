"""Secrets through the official client, and pods that take their environment from them: a
missing Secret or key keeps the container waiting in CreateContainerConfigError with the
kubelet's message, and it starts at the kubelet's next try once the Secret is there."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.simcluster.manifests import L4, gpu_job

NS = "team-nlp"


@pytest.fixture
def core(sim_cluster):
    api = sim_cluster.core()
    api.create_namespace({"metadata": {"name": NS}})
    return api


def secret(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "stringData": data}


def job_using(name: str, *, env: list[dict] | None = None, env_from: list[dict] | None = None):
    manifest = gpu_job(name, product=L4, duration=600)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    if env is not None:
        container["env"] = env
    if env_from is not None:
        container["envFrom"] = env_from
    return manifest


def key_ref(secret_name: str, key: str, **more) -> dict:
    return {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key, **more}},
    }


def the_pod(sim, job: str):
    (pod,) = sim.core().list_namespaced_pod(NS, label_selector=f"gpuportal.io/job={job}").items
    return pod


def waiting(sim, job: str):
    state = the_pod(sim, job).status.container_statuses[0].state
    return (state.waiting.reason, state.waiting.message) if state.waiting else state


def error_of(excinfo) -> tuple[int, dict]:
    return excinfo.value.status, json.loads(excinfo.value.body)


# --- The resource ---------------------------------------------------------------------------


def test_a_secret_is_created_read_listed_and_deleted_with_its_data_in_base64(sim_cluster, core):
    created = core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": "wandb", "labels": {"app": "tracking"}},
            "data": {"host": base64.b64encode(b"wandb.example").decode()},
            "stringData": {"api-key": "abc123secret"},
        },
    )

    assert isinstance(created, client.V1Secret)
    assert created.type == "Opaque"
    assert created.data == {
        "api-key": base64.b64encode(b"abc123secret").decode(),
        "host": base64.b64encode(b"wandb.example").decode(),
    }
    assert created.string_data is None
    read = core.read_namespaced_secret("wandb", NS)
    assert (read.metadata.uid, read.data) == (created.metadata.uid, created.data)
    core.create_namespaced_secret(NS, secret("hf-token", token="hf_x"))
    assert [s.metadata.name for s in core.list_namespaced_secret(NS).items] == ["hf-token", "wandb"]
    assert [s.metadata.name for s in core.list_secret_for_all_namespaces().items] == [
        "hf-token",
        "wandb",
    ]
    assert [
        s.metadata.name
        for s in core.list_namespaced_secret(NS, label_selector="app=tracking").items
    ] == ["wandb"]

    status = core.delete_namespaced_secret("wandb", NS)

    assert (status["status"], status["details"]["name"], status["details"]["kind"]) == (
        "Success",
        "wandb",
        "secrets",
    )
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_secret("wandb", NS)
    assert error_of(gone)[1]["message"] == 'secrets "wandb" not found'


def test_a_duplicate_a_missing_namespace_and_bad_data_are_refused_as_kubernetes_does(core):
    core.create_namespaced_secret(NS, secret("wandb", k="v"))

    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_secret(NS, secret("wandb", k="v"))
    with pytest.raises(ApiException) as nowhere:
        core.create_namespaced_secret("team-nobody", secret("wandb", k="v"))
    with pytest.raises(ApiException) as not_base64:
        core.create_namespaced_secret(NS, {"metadata": {"name": "x"}, "data": {"k": "abc$"}})
    with pytest.raises(ApiException) as bad_names:
        core.create_namespaced_secret(NS, secret("Wandb", **{"api/key": "v"}))

    assert error_of(duplicate)[0] == 409
    assert error_of(duplicate)[1]["message"] == 'secrets "wandb" already exists'
    assert error_of(nowhere)[1]["message"] == 'namespaces "team-nobody" not found'
    assert (error_of(not_base64)[0], error_of(not_base64)[1]["message"]) == (
        400,
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3',
    )
    code, body = error_of(bad_names)
    assert code == 422
    assert [(c["field"], c["message"].split(":")[0]) for c in body["details"]["causes"]] == [
        ("metadata.name", "Invalid value"),
        ("data[api/key]", "Invalid value"),
    ]


def test_a_container_env_is_checked_as_the_api_server_checks_it_without_quoting_values(
    sim_cluster, core
):
    bad = job_using(
        "bad",
        env=[
            {
                "name": "A",
                "value": "hunter2",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
            },
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "Wandb", "key": "a/b"}}},
        ],
        env_from=[{"secretRef": {"name": "Hf"}}],
    )

    with pytest.raises(ApiException) as refused:
        sim_cluster.batch().create_namespaced_job(NS, bad)

    code, body = error_of(refused)
    prefix = "spec.template.spec.containers[0]"
    assert code == 422
    assert [c["field"] for c in body["details"]["causes"]] == [
        f"{prefix}.env[0].valueFrom",
        f"{prefix}.env[1].valueFrom.secretKeyRef.name",
        f"{prefix}.env[1].valueFrom.secretKeyRef.key",
        f"{prefix}.envFrom[0].secretRef.name",
    ]
    assert "hunter2" not in body["message"]


# --- Pods that need them ----------------------------------------------------------------------


def test_a_missing_secret_keeps_the_container_waiting_until_it_exists(sim_cluster, core):
    sim_cluster.batch().create_namespaced_job(
        NS, job_using("train", env=[key_ref("wandb", "api-key")])
    )
    sim_cluster.advance(30)

    pod = the_pod(sim_cluster, "train")
    assert waiting(sim_cluster, "train") == (
        "CreateContainerConfigError",
        'secret "wandb" not found',
    )
    assert pod.status.phase == "Pending" and pod.spec.node_name  # bound, holding its GPU
    with pytest.raises(ApiException) as no_log:
        core.read_namespaced_pod_log(pod.metadata.name, NS)
    assert error_of(no_log)[1]["message"] == (
        f'container "main" in pod "{pod.metadata.name}" is waiting to start: '
        "CreateContainerConfigError"
    )

    core.create_namespaced_secret(NS, secret("wandb", other="x"))
    sim_cluster.advance(10)

    assert waiting(sim_cluster, "train") == (
        "CreateContainerConfigError",
        f"couldn't find key api-key in Secret {NS}/wandb",
    )

    core.delete_namespaced_secret("wandb", NS)
    core.create_namespaced_secret(NS, secret("wandb", **{"api-key": "abc123secret"}))
    sim_cluster.advance(10)  # the kubelet tries every 10 s

    pod = the_pod(sim_cluster, "train")
    assert pod.status.phase == "Running"
    events = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod.metadata.name},reason=Failed"
    ).items
    assert [(e.message, e.count, e.type) for e in events] == [
        ('Error: secret "wandb" not found', 3, "Warning"),
        (f"Error: couldn't find key api-key in Secret {NS}/wandb", 1, "Warning"),
    ]


def test_env_from_a_missing_secret_fails_the_same_way(sim_cluster, core):
    sim_cluster.batch().create_namespaced_job(
        NS, job_using("train", env_from=[{"secretRef": {"name": "hf-token"}}])
    )
    sim_cluster.advance(30)

    assert waiting(sim_cluster, "train") == (
        "CreateContainerConfigError",
        'secret "hf-token" not found',
    )


def test_optional_references_to_what_is_missing_are_skipped(sim_cluster, core):
    core.create_namespaced_secret(NS, secret("wandb", other="x"))
    sim_cluster.batch().create_namespaced_job(
        NS,
        job_using(
            "train",
            env=[key_ref("wandb", "api-key", optional=True), key_ref("absent", "k", optional=True)],
            env_from=[{"secretRef": {"name": "hf-token", "optional": True}}],
        ),
    )
    sim_cluster.advance(30)

    assert the_pod(sim_cluster, "train").status.phase == "Running"


def test_keys_that_are_no_variable_names_are_skipped_with_an_event(sim_cluster, core):
    core.create_namespaced_secret(NS, secret("hf-token", **{"HF_TOKEN": "x", "1st": "y"}))
    sim_cluster.batch().create_namespaced_job(
        NS, job_using("train", env_from=[{"secretRef": {"name": "hf-token"}}])
    )
    sim_cluster.advance(30)

    pod = the_pod(sim_cluster, "train")
    assert pod.status.phase == "Running"
    (event,) = core.list_namespaced_event(
        NS, field_selector="reason=InvalidEnvironmentVariableNames"
    ).items
    assert event.message == (
        f"Keys [1st] from the EnvFrom secret {NS}/hf-token were skipped since they are "
        "considered invalid environment variable names."
    )
