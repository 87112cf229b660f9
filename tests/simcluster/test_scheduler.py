"""kube-scheduler's filters and message, without a server."""

from __future__ import annotations

from collections import Counter

from simcluster.jobs import index_ranges
from simcluster.quantity import milli, parse_resources
from simcluster.scheduler import NodeInfo, fit_error, schedule, tolerates


def node(name: str, gpus: int, **spec) -> NodeInfo:
    obj = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec}
    return NodeInfo(obj, parse_resources({"nvidia.com/gpu": gpus, "cpu": "8", "pods": 110}), {})


def pod(gpus: int, **spec) -> dict:
    container = {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"spec": {"containers": [container], **spec}}


def test_reasons_sort_as_strings_like_kube_scheduler():
    reasons = {f"n{i}": ["Insufficient nvidia.com/gpu"] for i in range(10)}
    reasons["m"] = ["node(s) were unschedulable"]
    resolvable = {name: name != "m" for name in reasons}

    message = fit_error(11, reasons, resolvable, {})

    assert message == (
        "0/11 nodes are available: 1 node(s) were unschedulable, 10 Insufficient nvidia.com/gpu. "
        "preemption: 0/11 nodes are available: 1 Preemption is not helpful for scheduling, "
        "10 No preemption victims found for incoming pod."
    )


def test_a_pod_that_cannot_preempt_says_so():
    message = fit_error(1, {"a": ["Insufficient cpu"]}, {"a": True}, {"preemptionPolicy": "Never"})

    assert message.endswith("preemption: not eligible due to preemptionPolicy=Never.")


def test_every_short_resource_of_a_node_counts():
    decision = schedule(
        {
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "i",
                        "resources": {
                            "requests": {"cpu": "9", "nvidia.com/gpu": "9"},
                            "limits": {"nvidia.com/gpu": "9"},
                        },
                    }
                ]
            }
        },
        [node("a", 8)],
    )

    assert decision.message.startswith(
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    )


def test_it_packs_onto_the_fullest_node_that_fits():
    roomy, tight = node("a", 8), node("b", 8)
    tight = NodeInfo(tight.node, tight.allocatable, {"nvidia.com/gpu": milli(6)})

    assert schedule(pod(2), [roomy, tight]).node == "b"
    assert schedule(pod(3), [roomy, tight]).node == "a"


def test_tolerations_match_like_kubernetes():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

    assert tolerates({"key": "nvidia.com/gpu", "operator": "Exists"}, taint)
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": "nvidia.com/gpu", "value": "present"}, taint)
    assert not tolerates({"key": "nvidia.com/gpu", "value": "absent"}, taint)
    assert not tolerates(
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, taint
    )


def test_only_untolerated_no_schedule_and_no_execute_taints_filter():
    soft = node("a", 8, taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    hard = node("b", 8, taints=[{"key": "x", "value": "y", "effect": "NoExecute"}])

    assert schedule(pod(1), [soft]).node == "a"
    assert "1 node(s) had untolerated taint {x: y}" in schedule(pod(1), [hard]).message


def test_quantities_are_exact_milli_units():
    assert parse_resources({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2, "x": "1.5k"}) == {
        "cpu": 500,
        "memory": 2**30 * 1000,
        "nvidia.com/gpu": 2000,
        "x": 1_500_000,
    }
    assert milli("0.1") + milli("0.2") == milli("300m")


def test_completed_indexes_are_compressed_to_ranges():
    assert index_ranges({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"
    assert index_ranges(set()) == ""
    assert Counter(index_ranges({5}).split(",")) == Counter(["5"])
