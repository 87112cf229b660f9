"""The simulated nodes, read from a YAML file (see ``examples/cluster.yaml`` and
``docs/simulated-cluster.md``).

The file has an optional ``simulation`` section (defaults for pods' run time and image pulls), an
optional ``node_defaults`` and a list of ``node_groups``. A group gives what its nodes share
(labels, annotations, allocatable, taints, conditions, ``unschedulable``) and lists its ``nodes``,
each with a ``name`` and the same optional keys. Maps merge (defaults < group < node); taints and
conditions add up; ``unschedulable`` is overridden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simcluster.quantity import QuantityError, parse_quantity

_MAP_KEYS = ("labels", "annotations", "allocatable", "capacity")
_LIST_KEYS = ("taints", "conditions")
_NODE_KEYS = {*_MAP_KEYS, *_LIST_KEYS, "unschedulable"}
_TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}

# Labels every kubelet puts on its node.
_KUBELET_LABELS = {
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
}
_DEFAULT_ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


class NodeFileError(ValueError):
    """The cluster file is not valid; the message names the place."""


@dataclass(frozen=True)
class SimulationSettings:
    """How simulated pods behave when their pod does not say otherwise (simulated seconds)."""

    default_duration_seconds: float = 1800.0
    image_pull_seconds: float = 2.0
    default_gpu_utilization: float = 100.0  # percent, what DCGM reports for a pod that says nothing


@dataclass(frozen=True)
class NodeSpec:
    """One node as the file describes it, before the cluster gives it uid and resourceVersion."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    unschedulable: bool = False


@dataclass(frozen=True)
class PoolSpec:
    """A node pool the simulated provisioner grows and shrinks (``node_pools`` in the file):
    new nodes are built from ``layers`` (the template group's, then the pool's own labels),
    Ready after a lead time drawn around ``lead_median`` (90th percentile ``lead_p90``, simulated
    seconds); a request fails with probability ``failure_rate``."""

    name: str
    layers: tuple[dict[str, Any], ...]
    lead_median: float
    lead_p90: float
    failure_rate: float = 0.0


@dataclass(frozen=True)
class ClusterSpec:
    nodes: list[NodeSpec]
    simulation: SimulationSettings
    pools: list[PoolSpec] = field(default_factory=list)


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """Read and validate a cluster file. Raises :class:`NodeFileError` naming what is wrong."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise NodeFileError(f"{path}: {error}") from error
    return parse_cluster(data, source=str(path))


def parse_cluster(data: Any, source: str = "cluster file") -> ClusterSpec:
    """Validate the parsed YAML of a cluster file (see the module docstring)."""
    if not isinstance(data, dict):
        raise NodeFileError(f"{source}: expected a mapping at the top")
    unknown = set(data) - {"simulation", "node_defaults", "node_groups", "node_pools"}
    if unknown:
        raise NodeFileError(f"{source}: unknown top-level keys {sorted(unknown)}")
    simulation = _simulation(data.get("simulation") or {}, source)
    defaults = _section(data.get("node_defaults") or {}, f"{source}: node_defaults")
    nodes: list[NodeSpec] = []
    templates: dict[str, dict[str, Any]] = {}
    for index, group in enumerate(data.get("node_groups") or []):
        where = f"{source}: node_groups[{index}]"
        if not isinstance(group, dict):
            raise NodeFileError(f"{where}: expected a mapping")
        members = group.get("nodes")
        if not isinstance(members, list) or not members:
            raise NodeFileError(f"{where}: a group needs a non-empty list of nodes")
        shared = _section({k: v for k, v in group.items() if k not in ("name", "nodes")}, where)
        if group.get("name"):
            templates[str(group["name"])] = shared
        for number, member in enumerate(members):
            node_where = f"{where}.nodes[{number}]"
            if not isinstance(member, dict) or not member.get("name"):
                raise NodeFileError(f"{node_where}: a node needs a name")
            own = _section({k: v for k, v in member.items() if k != "name"}, node_where)
            nodes.append(_merge(str(member["name"]), [defaults, shared, own], node_where))
    names = [node.name for node in nodes]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise NodeFileError(f"{source}: duplicate node names {duplicates}")
    if not nodes:
        raise NodeFileError(f"{source}: no nodes")
    pools = _pools(data.get("node_pools") or [], defaults, templates, source)
    return ClusterSpec(nodes=nodes, simulation=simulation, pools=pools)


# The label the provisioner puts on a pool's nodes (the portal reads it: queues.cluster).
NODE_POOL_LABEL = "gpuportal.io/node-pool"


def _pools(
    data: Any, defaults: dict[str, Any], templates: dict[str, dict[str, Any]], source: str
) -> list[PoolSpec]:
    if not isinstance(data, list):
        raise NodeFileError(f"{source}: node_pools must be a list")
    pools: list[PoolSpec] = []
    for index, raw in enumerate(data):
        where = f"{source}: node_pools[{index}]"
        if not isinstance(raw, dict) or not raw.get("name"):
            raise NodeFileError(f"{where}: a pool needs a name")
        unknown = set(raw) - {"name", "template", "labels", "lead_seconds", "failure_rate"}
        if unknown:
            raise NodeFileError(f"{where}: unknown keys {sorted(unknown)}")
        template = str(raw.get("template", ""))
        if template not in templates:
            raise NodeFileError(f"{where}.template: no node group named {template!r}")
        lead = raw.get("lead_seconds") or {}
        try:
            median = float(lead["median"])
            p90 = float(lead.get("p90", median))
            failure = float(raw.get("failure_rate", 0))
        except (KeyError, TypeError, ValueError) as error:
            raise NodeFileError(f"{where}: lead_seconds needs a median: {error}") from None
        if not 0 < median <= p90 or not 0 <= failure < 1:
            raise NodeFileError(f"{where}: needs 0 < median <= p90 and 0 <= failure_rate < 1")
        labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
        own = _section({"labels": {**labels, NODE_POOL_LABEL: str(raw["name"])}}, where)
        pools.append(
            PoolSpec(str(raw["name"]), (defaults, templates[template], own), median, p90, failure)
        )
    return pools


def pool_node_spec(pool: PoolSpec, name: str) -> NodeSpec:
    """A new node of ``pool``."""
    return _merge(name, list(pool.layers), f"node_pools[{pool.name}]")


def _simulation(data: Any, source: str) -> SimulationSettings:
    if not isinstance(data, dict):
        raise NodeFileError(f"{source}: simulation must be a mapping")
    unknown = set(data) - {
        "default_duration_seconds",
        "image_pull_seconds",
        "default_gpu_utilization",
    }
    if unknown:
        raise NodeFileError(f"{source}: unknown simulation keys {sorted(unknown)}")
    values = {key: float(value) for key, value in data.items()}
    if any(value < 0 for value in values.values()):
        raise NodeFileError(f"{source}: simulation durations must not be negative")
    return SimulationSettings(**values)


def _section(data: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = set(data) - _NODE_KEYS
    if unknown:
        raise NodeFileError(f"{where}: unknown keys {sorted(unknown)}")
    for key in _MAP_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise NodeFileError(f"{where}.{key}: expected a mapping")
    for key in _LIST_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, list):
            raise NodeFileError(f"{where}.{key}: expected a list")
    for number, taint in enumerate(data.get("taints") or []):
        if (
            not isinstance(taint, dict)
            or not taint.get("key")
            or taint.get("effect") not in _TAINT_EFFECTS
        ):
            raise NodeFileError(
                f"{where}.taints[{number}]: needs a key and an effect of {sorted(_TAINT_EFFECTS)}"
            )
    for number, condition in enumerate(data.get("conditions") or []):
        if not isinstance(condition, dict) or not condition.get("type"):
            raise NodeFileError(f"{where}.conditions[{number}]: needs a type")
        if str(condition.get("status")) not in ("True", "False", "Unknown"):
            raise NodeFileError(
                f"{where}.conditions[{number}]: status must be True, False or Unknown"
            )
    for key in ("allocatable", "capacity"):
        for resource, amount in (data.get(key) or {}).items():
            try:
                parse_quantity(amount)
            except QuantityError as error:
                raise NodeFileError(f"{where}.{key}.{resource}: {error}") from error
    return data


def _merge(name: str, layers: list[dict[str, Any]], where: str) -> NodeSpec:
    merged: dict[str, Any] = {key: {} for key in _MAP_KEYS} | {key: [] for key in _LIST_KEYS}
    unschedulable = False
    for layer in layers:
        for key in _MAP_KEYS:
            merged[key].update({str(k): str(v) for k, v in (layer.get(key) or {}).items()})
        for key in _LIST_KEYS:
            merged[key].extend(layer.get(key) or [])
        if "unschedulable" in layer:
            unschedulable = bool(layer["unschedulable"])
    allocatable = {**_DEFAULT_ALLOCATABLE, **merged["allocatable"]}
    return NodeSpec(
        name=name,
        labels={**_KUBELET_LABELS, "kubernetes.io/hostname": name, **merged["labels"]},
        annotations=merged["annotations"],
        allocatable=allocatable,
        capacity={**allocatable, **merged["capacity"]},
        taints=[_taint(taint) for taint in merged["taints"]],
        conditions=[
            dict(condition, status=str(condition["status"])) for condition in merged["conditions"]
        ],
        unschedulable=unschedulable,
    )


def _taint(taint: dict[str, Any]) -> dict[str, Any]:
    result = {"key": str(taint["key"]), "effect": taint["effect"]}
    if taint.get("value") is not None:
        result["value"] = str(taint["value"])
    return result
