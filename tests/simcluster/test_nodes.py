"""Nodes and namespaces through the official client: list, get, watch, patch, errors."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from simcluster.scheduler import UNSCHEDULABLE_TAINT


def test_it_lists_the_example_nodes_with_a_resource_version(sim_cluster):
    nodes = sim_cluster.core().list_node()

    assert len(nodes.items) == 18
    assert int(nodes.metadata.resource_version) > 0
    assert [n.metadata.name for n in nodes.items][:3] == ["a100-01", "a100-02", "a100-03"]
    assert all(n.metadata.uid and n.metadata.resource_version for n in nodes.items)
    assert all(n.metadata.creation_timestamp.tzinfo is not None for n in nodes.items)


def test_it_reports_gpu_feature_discovery_labels_and_allocatable(sim_cluster):
    core = sim_cluster.core()

    h100 = core.read_node("h100-01")
    t4 = core.read_node("t4-01")
    mig = core.read_node("a100-03")

    assert h100.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.metadata.labels["network.gpuportal.io/domain"] == "ib-a"
    assert h100.status.allocatable["nvidia.com/gpu"] == "8"
    assert [(t.key, t.value, t.effect) for t in h100.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    assert t4.metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert t4.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert t4.status.allocatable["nvidia.com/gpu"] == "16"
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.status.allocatable["nvidia.com/gpu"] == "0"
    assert mig.status.allocatable["nvidia.com/mig-1g.10gb"] == "28"
    assert mig.status.allocatable["nvidia.com/mig-3g.40gb"] == "8"


def test_it_shows_the_cordoned_and_the_unhealthy_node(sim_cluster):
    core = sim_cluster.core()

    cordoned = core.read_node("h100-05")
    unhealthy = core.read_node("l4-04")

    assert cordoned.spec.unschedulable is True
    assert {t.key for t in cordoned.spec.taints} == {
        "nvidia.com/gpu",
        "gpuportal.io/maintenance",
        UNSCHEDULABLE_TAINT,
    }
    assert cordoned.metadata.annotations["gpuportal.io/maintenance-reason"] == "NVLink replacement"
    assert cordoned.metadata.annotations["gpuportal.io/maintenance-until"] == "2027-01-15T18:00:00Z"
    health = next(c for c in unhealthy.status.conditions if c.type == "GPUHealthy")
    assert (health.status, health.reason, health.message) == (
        "False",
        "ECCErrors",
        "double-bit ECC errors on GPU 2",
    )
    assert unhealthy.metadata.labels["nvidia.com/gpu.health"] == "ecc-errors"


def test_it_answers_404_for_an_unknown_node(sim_cluster):
    with pytest.raises(client.ApiException) as raised:
        sim_cluster.core().read_node("h100-99")

    assert raised.value.status == 404
    assert '"reason":"NotFound"' in raised.value.body
    assert 'nodes \\"h100-99\\" not found' in raised.value.body


def test_it_selects_nodes_by_label_and_field(sim_cluster):
    core = sim_cluster.core()

    l4s = core.list_node(
        label_selector="nvidia.com/gpu.product=NVIDIA-L4,nvidia.com/gpu.health!=ecc-errors"
    )
    ib = core.list_node(
        label_selector="network.gpuportal.io/domain in (ib-a),nvidia.com/gpu.product"
    )
    cordoned = core.list_node(field_selector="spec.unschedulable=true")

    assert [n.metadata.name for n in l4s.items] == ["l4-01", "l4-02", "l4-03", "l4-05"]
    assert len(ib.items) == 8
    assert [n.metadata.name for n in cordoned.items] == ["h100-05"]


def test_it_strategic_merge_patches_labels_annotations_and_cordon(sim_cluster):
    core = sim_cluster.core()
    before = core.read_node("h100-02")

    patched = core.patch_node(
        "h100-02",
        {
            "metadata": {
                "labels": {"gpuportal.io/drain": "true"},
                "annotations": {"gpuportal.io/maintenance-reason": "BIOS"},
            },
            "spec": {"unschedulable": True},
        },
    )

    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)
    assert patched.metadata.labels["gpuportal.io/drain"] == "true"
    assert patched.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert patched.metadata.annotations["gpuportal.io/maintenance-reason"] == "BIOS"
    assert patched.spec.unschedulable is True
    assert UNSCHEDULABLE_TAINT in {t.key for t in patched.spec.taints}


def test_it_merge_patches_taints_as_a_whole_list_and_deletes_with_null(sim_cluster):
    core = sim_cluster.core()

    patched = core.patch_node(
        "h100-05",
        {
            "metadata": {"annotations": {"gpuportal.io/maintenance-reason": None}},
            "spec": {
                "unschedulable": None,
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            },
        },
        _content_type="application/merge-patch+json",
    )

    assert patched.spec.unschedulable is None
    assert [t.key for t in patched.spec.taints] == ["nvidia.com/gpu"]
    assert "gpuportal.io/maintenance-reason" not in patched.metadata.annotations


def test_it_applies_a_json_patch(sim_cluster):
    patched = sim_cluster.core().patch_node(
        "t4-01",
        [{"op": "add", "path": "/metadata/labels/gpuportal.io~1pool", "value": "notebooks"}],
    )

    assert patched.metadata.labels["gpuportal.io/pool"] == "notebooks"


def test_it_refuses_a_patch_with_a_stale_resource_version(sim_cluster):
    core = sim_cluster.core()
    stale = core.read_node("l4-01").metadata.resource_version
    core.patch_node("l4-01", {"metadata": {"labels": {"a": "1"}}})

    with pytest.raises(client.ApiException) as raised:
        core.patch_node("l4-01", {"metadata": {"resourceVersion": stale, "labels": {"a": "2"}}})

    assert raised.value.status == 409
    assert '"reason":"Conflict"' in raised.value.body


def test_it_refuses_an_invalid_taint_effect(sim_cluster):
    with pytest.raises(client.ApiException) as raised:
        sim_cluster.core().patch_node(
            "l4-01", {"spec": {"taints": [{"key": "x", "effect": "Sometimes"}]}}
        )

    assert raised.value.status == 422
    assert '"reason":"Invalid"' in raised.value.body


def test_a_node_watch_sees_a_patch_as_modified(sim_cluster):
    core = sim_cluster.core()
    since = core.list_node().metadata.resource_version
    core.patch_node("a100-01", {"metadata": {"labels": {"gpuportal.io/drain": "true"}}})

    stream = watch.Watch()
    events = []
    for event in stream.stream(core.list_node, resource_version=since, timeout_seconds=2):
        events.append(
            (
                event["type"],
                event["object"].metadata.name,
                event["object"].metadata.labels.get("gpuportal.io/drain"),
            )
        )
        stream.stop()

    assert events == [("MODIFIED", "a100-01", "true")]


def test_a_node_watch_without_resource_version_starts_with_every_node(sim_cluster):
    stream = watch.Watch()
    names = []
    for event in stream.stream(sim_cluster.core().list_node, timeout_seconds=2):
        names.append((event["type"], event["object"].metadata.name))
        if len(names) == 18:
            stream.stop()

    assert names[0] == ("ADDED", "a100-01")
    assert {kind for kind, _ in names} == {"ADDED"}


def test_it_creates_namespaces_and_refuses_duplicates(sim_cluster):
    core = sim_cluster.core()

    created = core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name="team-vision"))
    )
    with pytest.raises(client.ApiException) as raised:
        core.create_namespace({"metadata": {"name": "team-vision"}})

    assert created.status.phase == "Active"
    assert core.read_namespace("team-vision").metadata.uid == created.metadata.uid
    assert raised.value.status == 409
    assert '"reason":"AlreadyExists"' in raised.value.body
    assert 'namespaces \\"team-vision\\" already exists' in raised.value.body


def test_it_answers_404_for_a_missing_namespace_and_422_for_a_bad_name(sim_cluster):
    core = sim_cluster.core()

    with pytest.raises(client.ApiException) as missing:
        core.read_namespace("team-nowhere")
    with pytest.raises(client.ApiException) as bad:
        core.create_namespace({"metadata": {"name": "Team_Vision"}})

    assert missing.value.status == 404
    assert bad.value.status == 422


def test_it_refuses_a_client_without_the_token(sim_cluster):
    configuration = client.Configuration()
    configuration.host = sim_cluster.url
    with client.ApiClient(configuration) as api, pytest.raises(client.ApiException) as raised:
        client.CoreV1Api(api).list_node()

    assert raised.value.status == 401


def test_it_serves_discovery(sim_cluster):
    api = sim_cluster.api_client()

    version = client.VersionApi(api).get_code()
    groups = client.ApisApi(api).get_api_versions()

    assert version.major == "1"
    # batch, and the cluster-autoscaler's ProvisioningRequest group (the node pools' provisioner)
    assert [g.name for g in groups.groups] == ["batch", "autoscaling.x-k8s.io"]
