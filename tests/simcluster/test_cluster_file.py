"""The cluster file: loading, validation, and that the example fits the example policy."""

from __future__ import annotations

from fractions import Fraction

import pytest
import yaml

from simcluster import NodeFileError, SimCluster, load_cluster_file, parse_cluster
from tests.sim import EXAMPLE_CLUSTER

EXAMPLE_POLICY = EXAMPLE_CLUSTER.parent / "policy.yaml"
SHARE = {"1g.10gb": Fraction(1, 7), "3g.40gb": Fraction(3, 7)}


def healthy_capacity() -> dict[str, Fraction]:
    """GPU-equivalents per product on nodes that are neither cordoned nor unhealthy."""
    capacity: dict[str, Fraction] = {}
    for node in load_cluster_file(EXAMPLE_CLUSTER).nodes:
        product = node.labels.get("nvidia.com/gpu.product")
        if not product or node.unschedulable or node.labels.get("nvidia.com/gpu.health"):
            continue
        product = product.removesuffix("-SHARED")
        replicas = int(node.labels.get("nvidia.com/gpu.replicas", "1"))
        amount = Fraction(int(node.allocatable.get("nvidia.com/gpu", "0")), replicas)
        for profile, share in SHARE.items():
            amount += share * int(node.allocatable.get(f"nvidia.com/mig-{profile}", "0"))
        capacity[product] = capacity.get(product, Fraction(0)) + amount
    return capacity


def test_the_example_cluster_holds_the_example_policys_promises():
    policy = yaml.safe_load(EXAMPLE_POLICY.read_text())
    products = {c["name"]: c["product"] for c in policy["gpu_classes"]}
    promised: dict[str, Fraction] = {}
    for team in policy["teams"]:
        for gpu_class, quota in (team.get("quotas") or {}).items():
            promised[gpu_class] = promised.get(gpu_class, 0) + Fraction(str(quota["nominal"]))
    for reservation in policy["reservations"]:
        promised[reservation["gpu_class"]] += Fraction(str(reservation["amount"]))

    capacity = healthy_capacity()

    assert {name: capacity[products[name]] >= amount for name, amount in promised.items()} == {
        "h100-80gb": True,
        "a100-80gb": True,
        "l4": True,
        "t4": True,
    }
    assert capacity["NVIDIA-H100-80GB-HBM3"] == 32
    assert capacity["NVIDIA-L4"] == 16
    assert capacity["Tesla-T4"] == 16


def test_the_example_cluster_spreads_racks_over_two_network_domains():
    nodes = load_cluster_file(EXAMPLE_CLUSTER).nodes
    domains = {
        n.labels["topology.kubernetes.io/rack"]: n.labels["network.gpuportal.io/domain"]
        for n in nodes
    }

    assert domains == {"rack-1": "ib-a", "rack-2": "ib-a", "rack-3": "ib-b", "rack-4": "ib-b"}
    assert {
        n.labels["network.gpuportal.io/domain"] for n in nodes if n.name.startswith("h100")
    } == {"ib-a"}
    assert {
        n.labels["network.gpuportal.io/domain"] for n in nodes if n.name.startswith("a100")
    } == {"ib-b"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"node_groups": []}, "no nodes"),
        ({"nodes": []}, "unknown top-level keys ['nodes']"),
        (
            {"node_groups": [{"name": "g", "nodes": [{"name": "a"}, {"name": "a"}]}]},
            "duplicate node names ['a']",
        ),
        (
            {
                "node_groups": [
                    {"name": "g", "nodes": [{"name": "a", "allocatable": {"cpu": "lots"}}]}
                ]
            },
            "allocatable.cpu",
        ),
        (
            {
                "node_groups": [
                    {
                        "name": "g",
                        "nodes": [{"name": "a", "taints": [{"key": "k", "effect": "Never"}]}],
                    }
                ]
            },
            "taints[0]",
        ),
        (
            {"node_groups": [{"name": "g", "lables": {}, "nodes": [{"name": "a"}]}]},
            "unknown keys ['lables']",
        ),
    ],
)
def test_it_refuses_a_bad_cluster_file(document, message):
    with pytest.raises(NodeFileError) as raised:
        parse_cluster(document)

    assert message in str(raised.value)


def test_a_cluster_can_be_built_without_a_server():
    cluster = SimCluster.from_file(EXAMPLE_CLUSTER)

    assert cluster.summary()["nodes"][0]["name"] == "a100-01"
