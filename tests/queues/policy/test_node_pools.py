"""The policy's ``node_pools`` section: parsed, validated with errors naming the field, written,
exported and read back equal."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from queues.models import NodePool, NodePoolQueue
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import PolicyError, parse_policy
from queues.policy.text import policy_yaml
from tests.conftest import EXAMPLE_POLICY

pytestmark = pytest.mark.django_db

POOL = {
    "name": "l4-pool",
    "gpu_class": "l4",
    "min_nodes": 0,
    "max_nodes": 4,
    "node": {"gpus": 4, "labels": {"rack": "rack-5", "network_domain": "ib-b"}},
    "lead_time": {"median": "6m", "p90": "9m"},
    "scale_down_delay": "15m",
    "queues": {
        "interactive": {"may_scale_up": True, "warm_nodes": 2},
        "inference": {"warm_nodes": 1},
    },
}


def with_pools(*pools: dict) -> dict:
    data = yaml.safe_load(EXAMPLE_POLICY.read_text())
    data["node_pools"] = list(pools)
    return data


def problems(data: dict) -> list[str]:
    with pytest.raises(PolicyError) as excinfo:
        policy_apply(text=policy_yaml(data))
    return [str(p) for p in excinfo.value.problems]


def test_a_pool_is_written_with_its_queues_terms_and_exported_back_equal() -> None:
    policy_apply(text=policy_yaml(with_pools(POOL)))
    pool = NodePool.objects.get(name="l4-pool")
    assert pool.gpu_class.name == "l4"
    assert (pool.min_nodes, pool.max_nodes, pool.node_gpus) == (0, 4, 4)
    assert pool.node_labels == {"network_domain": "ib-b", "rack": "rack-5"}
    assert pool.lead_time_median == timedelta(minutes=6)
    assert pool.lead_time_p90 == timedelta(minutes=9)
    assert pool.scale_down_delay == timedelta(minutes=15)
    terms = {
        t.queue.name: (t.may_scale_up, t.warm_nodes)
        for t in NodePoolQueue.objects.filter(pool=pool)
    }
    assert terms == {"interactive": (True, 2), "inference": (False, 1)}
    current = policy_current()
    again = parse_policy(yaml.safe_load(dump_policy(current)), existing=current)
    assert again["node_pools"] == current["node_pools"]
    # applying the same file again changes nothing
    assert not policy_apply(text=policy_yaml(with_pools(POOL))).changed


def test_dropping_a_queue_from_a_pool_removes_its_terms() -> None:
    policy_apply(text=policy_yaml(with_pools(POOL)))
    fewer = dict(POOL, queues={"interactive": {"may_scale_up": True}})
    policy_apply(text=policy_yaml(with_pools(fewer)))
    assert list(NodePoolQueue.objects.values_list("queue__name", "warm_nodes")) == [
        ("interactive", 0)
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"gpu_class": "b200"}, "node_pools[l4-pool].gpu_class: unknown GPU class 'b200'"),
        ({"max_nodes": None}, "node_pools[l4-pool].max_nodes: required"),
        (
            {"min_nodes": 5},
            "node_pools[l4-pool].max_nodes: 4 is less than min_nodes 5",
        ),
        ({"max_nodes": 0}, "node_pools[l4-pool].max_nodes: must be greater than 0 (got 0)"),
        ({"min_nodes": -1}, "node_pools[l4-pool].min_nodes: must not be negative (got -1)"),
        (
            {"lead_time": {"median": "10m", "p90": "5m"}},
            "node_pools[l4-pool].lead_time.p90: 5m is shorter than median 10m",
        ),
        ({"lead_time": "6m"}, "node_pools[l4-pool].lead_time: must be a mapping of fields"),
        ({"node": {"gpus": 0}}, "node_pools[l4-pool].node.gpus: must be greater than 0 (got 0)"),
        (
            {"node": {"gpus": 4, "colour": "red"}},
            "node_pools[l4-pool].node.colour: unknown field (expected one of: gpus, labels, "
            "mig_layout, time_slicing_replicas)",
        ),
        (
            {"node": {"gpus": 4, "mig_layout": {"1g.10gb": 7}}},
            "node_pools[l4-pool].node.mig_layout.1g.10gb: 1g.10gb is not one of the class's "
            "MIG profiles",
        ),
        (
            {"queues": {"nobody": {"may_scale_up": True}}},
            "node_pools[l4-pool].queues.nobody: unknown queue 'nobody'",
        ),
        (
            {"queues": {"interactive": {"may_scale_up": "yes"}}},
            "node_pools[l4-pool].queues.interactive.may_scale_up: 'yes' is not true or false",
        ),
        (
            {"queues": {"interactive": {"warm_nodes": 5}}},
            "node_pools[l4-pool].queues: warm floors add up to 5 nodes, more than max_nodes 4",
        ),
        (
            {"scale_down_delay": "soon"},
            "node_pools[l4-pool].scale_down_delay: ",
        ),
    ],
)
def test_a_bad_pool_is_refused_naming_the_field_and_nothing_is_stored(change, expected) -> None:
    found = problems(with_pools({**POOL, **change}))
    assert any(p.startswith(expected) for p in found), found
    assert not NodePool.objects.exists()


def test_two_pools_for_one_class_are_refused() -> None:
    found = problems(with_pools(POOL, {**POOL, "name": "l4-second"}))
    assert found == ["node_pools[l4-second].gpu_class: l4 already has node pool l4-pool"]
