"""Placement as kube-scheduler filters it, and its message when a pod fits nowhere."""

from __future__ import annotations

import pytest

from tests.sim import cluster_yaml
from tests.simcluster.manifests import A100, H100, T4_SHARED, gpu_job

NS = "team-research"

EIGHT_NODES = cluster_yaml(
    """
node_groups:
  - name: gpu
    labels: {nvidia.com/gpu.product: NVIDIA-L4}
    allocatable: {cpu: "32", memory: 128Gi, nvidia.com/gpu: "4"}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    nodes:
      - {name: gpu-1, taints: [{key: gpuportal.io/maintenance, effect: NoSchedule}]}
      - {name: gpu-2, taints: [{key: gpuportal.io/maintenance, effect: NoSchedule}]}
      - {name: gpu-3}
      - {name: gpu-4}
      - {name: gpu-5}
      - {name: gpu-6}
      - {name: gpu-7}
      - {name: gpu-8}
"""
)


@pytest.fixture
def cluster(sim_cluster):
    sim_cluster.core().create_namespace({"metadata": {"name": NS}})
    return sim_cluster


def pods_of(cluster, job: str):
    return (
        cluster.core()
        .list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job}")
        .items
    )


def unschedulable_message(pod) -> str:
    [condition] = pod.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    return condition.message


def test_it_explains_an_unschedulable_pod_in_kube_schedulers_words(sim_cluster_factory):
    small = sim_cluster_factory(nodes=EIGHT_NODES)
    small.core().create_namespace({"metadata": {"name": NS}})

    small.batch().create_namespaced_job(NS, gpu_job("too-big", gpus=8, product=None))
    [pod] = small.core().list_namespaced_pod(NS).items

    assert pod.status.phase == "Pending"
    assert unschedulable_message(pod) == (
        "0/8 nodes are available: 2 node(s) had untolerated taint {gpuportal.io/maintenance: }, "
        "6 Insufficient nvidia.com/gpu. preemption: 0/8 nodes are available: "
        "2 Preemption is not helpful for scheduling, 6 No preemption victims found for incoming pod."
    )


def test_the_example_cluster_counts_cordoned_and_mismatched_nodes(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("nine", gpus=9, product=H100))
    [pod] = pods_of(cluster, "nine")

    assert unschedulable_message(pod) == (
        "0/18 nodes are available: 1 node(s) were unschedulable, "
        "13 node(s) didn't match Pod's node affinity/selector, 4 Insufficient nvidia.com/gpu. "
        "preemption: 0/18 nodes are available: 14 Preemption is not helpful for scheduling, "
        "4 No preemption victims found for incoming pod."
    )


def test_a_pod_without_the_gpu_toleration_is_kept_off_gpu_nodes(cluster):
    manifest = gpu_job("no-toleration", product=None)
    manifest["spec"]["template"]["spec"]["tolerations"] = []
    cluster.batch().create_namespaced_job(NS, manifest)
    [pod] = pods_of(cluster, "no-toleration")

    assert unschedulable_message(pod).startswith(
        "0/18 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable, "
        "16 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_a_pod_pinned_by_node_name_reports_the_prefilter(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("first", gpus=8, node_names=["h100-02"]))
    batch.create_namespaced_job(NS, gpu_job("second", gpus=1, node_names=["h100-02"]))
    [first], [second] = pods_of(cluster, "first"), pods_of(cluster, "second")

    assert first.spec.node_name == "h100-02"
    assert unschedulable_message(second) == (
        "0/18 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "17 node is filtered out by the prefilter result. preemption: 0/18 nodes are available: "
        "1 No preemption victims found for incoming pod, 17 Preemption is not helpful for scheduling."
    )


def test_the_scheduler_records_failed_scheduling_events(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("nine", gpus=9, product=H100))
    [pod] = pods_of(cluster, "nine")

    events = cluster.core().list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod.metadata.name},reason=FailedScheduling"
    )

    [event] = events.items
    assert (event.type, event.source.component) == ("Warning", "default-scheduler")
    assert event.message == unschedulable_message(pod)


def test_a_pending_pod_is_placed_when_capacity_frees(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(NS, gpu_job("runs", gpus=8, node_names=["h100-03"], duration=100))
    batch.create_namespaced_job(NS, gpu_job("waits", gpus=8, node_names=["h100-03"], duration=100))
    [waiting] = pods_of(cluster, "waits")

    cluster.advance(102)
    [placed] = pods_of(cluster, "waits")

    assert waiting.spec.node_name is None
    assert placed.spec.node_name == "h100-03"
    assert (
        placed.status.conditions[-1].type == "PodScheduled"
        and placed.status.conditions[-1].status == "True"
    )


def test_mig_slices_are_scheduled_as_their_own_resource(cluster):
    cluster.batch().create_namespaced_job(
        NS,
        gpu_job("slices", resource="nvidia.com/mig-1g.10gb", product=A100, pods=29, indexed=True),
    )

    pods = pods_of(cluster, "slices")
    bound = [p.spec.node_name for p in pods if p.spec.node_name]
    [pending] = [p for p in pods if not p.spec.node_name]

    assert bound == ["a100-03"] * 28
    assert unschedulable_message(pending).startswith(
        "0/18 nodes are available: 1 node(s) were unschedulable, "
        "14 node(s) didn't match Pod's node affinity/selector, 3 Insufficient nvidia.com/mig-1g.10gb."
    )


def test_a_3g_slice_and_whole_gpus_share_nothing(cluster):
    batch = cluster.batch()
    batch.create_namespaced_job(
        NS,
        gpu_job("big-slice", resource="nvidia.com/mig-3g.40gb", product=A100, pods=8, indexed=True),
    )
    batch.create_namespaced_job(NS, gpu_job("whole", gpus=8, product=A100))

    slices = {p.spec.node_name for p in pods_of(cluster, "big-slice")}
    [whole] = pods_of(cluster, "whole")

    assert slices == {"a100-03"}
    assert whole.spec.node_name in ("a100-01", "a100-02")


def test_time_sliced_replicas_fill_one_node_before_the_next(cluster):
    cluster.batch().create_namespaced_job(
        NS, gpu_job("notebooks", product=T4_SHARED, pods=17, indexed=True, cpu="2", memory="8Gi")
    )

    nodes = [p.spec.node_name for p in pods_of(cluster, "notebooks")]

    assert sorted(nodes) == ["t4-01"] * 16 + ["t4-02"]


def test_required_node_affinity_expressions_are_honoured(cluster):
    manifest = gpu_job("rack", gpus=8, product=None)
    manifest["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "topology.kubernetes.io/rack",
                                "operator": "In",
                                "values": ["rack-2"],
                            },
                            {"key": "nvidia.com/gpu.product", "operator": "Exists"},
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "NotIn",
                                "values": ["NVIDIA-L4"],
                            },
                        ]
                    }
                ]
            }
        }
    }
    cluster.batch().create_namespaced_job(NS, manifest)

    [pod] = pods_of(cluster, "rack")

    assert pod.spec.node_name == "h100-04"


def test_a_new_no_execute_taint_evicts_pods_that_do_not_tolerate_it(cluster):
    cluster.batch().create_namespaced_job(NS, gpu_job("evicted", node_names=["h100-01"], grace=5))
    cluster.advance(2)

    cluster.core().patch_node(
        "h100-01",
        {
            "spec": {
                "taints": [
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "gpuportal.io/drain", "effect": "NoExecute"},
                ]
            }
        },
    )
    [pod] = pods_of(cluster, "evicted")
    job = cluster.batch().read_namespaced_job("evicted", NS)

    assert pod.metadata.deletion_timestamp is not None
    assert job.status.failed == 1
    assert [(c.type, c.reason) for c in job.status.conditions] == [
        ("FailureTarget", "BackoffLimitExceeded")
    ]
