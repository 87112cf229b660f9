"""Nodes are read the way GPU feature discovery and the device plugin label them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from queues.cluster.nodes import Conventions, node_facts, normalized_product


def node(
    name="n1",
    labels=None,
    allocatable=None,
    conditions=None,
    taints=None,
    annotations=None,
    unschedulable=False,
):
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", **(allocatable or {})},
            "conditions": conditions
            if conditions is not None
            else [{"type": "Ready", "status": "True"}],
        },
    }


def test_products_lose_the_time_slicing_and_single_mig_suffixes():
    assert normalized_product("Tesla-T4-SHARED") == ("Tesla-T4", None)
    assert normalized_product("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb") == (
        "NVIDIA-A100-SXM4-80GB",
        "1g.10gb",
    )
    assert normalized_product("NVIDIA-H100-80GB-HBM3") == ("NVIDIA-H100-80GB-HBM3", None)


def test_an_exclusive_node_with_topology():
    facts = node_facts(
        node(
            "h100-1",
            labels={
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "topology.kubernetes.io/rack": "r1",
                "network.gpuportal.io/domain": "ib-a",
            },
            allocatable={"nvidia.com/gpu": "8"},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        )
    )

    assert (facts.product, facts.gpu_count, facts.time_slice_replicas) == (
        "NVIDIA-H100-80GB-HBM3",
        8,
        1,
    )
    assert (facts.rack, facts.network_domain) == ("r1", "ib-a")
    assert facts.taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert facts.healthy and facts.maintenance == ""


def test_a_time_sliced_node_counts_physical_gpus_not_replicas():
    facts = node_facts(
        node(
            labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"},
            allocatable={"nvidia.com/gpu": "16"},
        )
    )

    assert (facts.product, facts.gpu_count, facts.time_slice_replicas) == ("Tesla-T4", 4, 4)


def test_a_mixed_strategy_mig_node_lists_its_slices():
    facts = node_facts(
        node(
            labels={
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.strategy": "mixed",
            },
            allocatable={
                "nvidia.com/gpu": "0",
                "nvidia.com/mig-1g.10gb": "28",
                "nvidia.com/mig-3g.40gb": "8",
            },
        )
    )

    assert facts.mig_layout == {"1g.10gb": 28, "3g.40gb": 8}
    assert facts.gpu_count == 8


def test_a_single_strategy_mig_node_takes_the_profile_from_the_product():
    facts = node_facts(
        node(
            labels={
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                "nvidia.com/gpu.count": "2",
            },
            allocatable={"nvidia.com/gpu": "14"},
        )
    )

    assert (facts.product, facts.mig_layout, facts.gpu_count) == (
        "NVIDIA-A100-SXM4-80GB",
        {"1g.10gb": 14},
        2,
    )


def test_every_health_problem_is_named():
    facts = node_facts(
        node(
            labels={"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.health": "ecc-errors"},
            conditions=[
                {"type": "Ready", "status": "True"},
                {
                    "type": "GPUHealthy",
                    "status": "False",
                    "reason": "ECCErrors",
                    "message": "double-bit ECC errors on GPU 2",
                },
                {"type": "GpuThermal", "status": "True", "reason": "Throttled"},
                {"type": "MemoryPressure", "status": "False"},
            ],
        )
    )

    assert not facts.healthy
    assert facts.health_reason == (
        "GPUHealthy: double-bit ECC errors on GPU 2; GpuThermal: Throttled; nvidia.com/gpu.health=ecc-errors"
    )


def test_a_node_that_is_not_ready_is_unhealthy():
    facts = node_facts(
        node(conditions=[{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}])
    )

    assert (facts.healthy, facts.health_reason) == (False, "Ready: NodeStatusUnknown")


def test_health_label_keys_are_configurable():
    labels = {"dcgm.example/health": "fail", "nvidia.com/gpu.health": "bad"}

    facts = node_facts(node(labels=labels), Conventions(health_labels=("dcgm.example/health",)))

    assert facts.health_reason == "dcgm.example/health=fail"


def test_maintenance_from_the_portal_taint_and_annotations():
    annotations = {
        "gpuportal.io/maintenance-reason": "NVLink replacement",
        "gpuportal.io/maintenance-until": "2026-12-03T14:00:00Z",
    }
    cordoned = node_facts(
        node(
            unschedulable=True,
            annotations=annotations,
            taints=[{"key": "gpuportal.io/maintenance", "effect": "NoSchedule"}],
        )
    )
    draining = node_facts(
        node(
            annotations=annotations,
            taints=[{"key": "gpuportal.io/maintenance", "effect": "NoExecute"}],
        )
    )
    plain_cordon = node_facts(node(unschedulable=True))

    assert (cordoned.maintenance, cordoned.maintenance_reason) == ("cordoned", "NVLink replacement")
    assert cordoned.maintenance_until == datetime(2026, 12, 3, 14, tzinfo=UTC)
    assert draining.maintenance == "draining"
    assert (
        plain_cordon.maintenance,
        plain_cordon.maintenance_reason,
        plain_cordon.maintenance_until,
    ) == ("cordoned", "", None)


def test_a_cpu_only_node_has_no_gpus():
    facts = node_facts(node("cpu-1"))

    assert (facts.product, facts.gpu_count, facts.mig_layout) == ("", 0, {})


@pytest.mark.parametrize(
    ("cpu", "memory", "millicores", "mib"),
    [
        ("96", "1Ti", 96_000, 1_048_576),
        ("15900m", "527893020Ki", 15_900, 515_520),
        ("0.5", "1073741824", 500, 1024),
        ("lots", "", 0, 0),
    ],
)
def test_allocatable_cpu_and_memory_in_the_portals_units(cpu, memory, millicores, mib):
    facts = node_facts(node("n1", allocatable={"cpu": cpu, "memory": memory}))

    assert (facts.cpu_millicores, facts.memory_mib) == (millicores, mib)
