"""Read a Kubernetes Node the way NVIDIA's GPU feature discovery and device plugin label it.

Pure functions over the Node as the API returns it (a JSON ``dict``): the adapter asks the
official client for raw JSON so that mirroring thousands of objects skips model building. No
Django, no API client: this module only interprets (quantities with the official client's
``parse_quantity``).

Conventions (see docs/cluster.md):

* GPU class from ``nvidia.com/gpu.product``, with the ``-SHARED`` suffix of time-slicing and the
  ``-MIG-<profile>`` suffix of the single MIG strategy stripped.
* Physical GPUs from ``nvidia.com/gpu.count``, or allocatable ``nvidia.com/gpu`` divided by
  ``nvidia.com/gpu.replicas`` on a time-sliced node.
* MIG layout from allocatable ``nvidia.com/mig-<profile>`` (mixed strategy), or, for the single
  strategy, allocatable ``nvidia.com/gpu`` slices of the profile in the product's suffix.
* Health: the node must be Ready; a condition named ``*Healthy`` that is ``False`` and any
  configured problem condition that is ``True`` make it unhealthy, as does a configured health
  label whose value is not one of ``ok``, ``healthy``, ``pass``, ``true``.
* Maintenance: the portal's taint ``gpuportal.io/maintenance`` (``NoExecute`` = draining,
  otherwise cordoned) or a cordon (``spec.unschedulable``); the reason and expected end come from
  the annotations ``gpuportal.io/maintenance-reason`` and ``gpuportal.io/maintenance-until``;
  after ``gpuportal.io/maintenance-deadline`` the portal preempts work still running there.
* Allocatable CPU and memory, so a submission can be told when no node could hold its pods.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.utils.quantity import parse_quantity

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MAINTENANCE_TAINT = "gpuportal.io/maintenance"
MAINTENANCE_REASON_ANNOTATION = "gpuportal.io/maintenance-reason"
MAINTENANCE_UNTIL_ANNOTATION = "gpuportal.io/maintenance-until"
MAINTENANCE_DEADLINE_ANNOTATION = "gpuportal.io/maintenance-deadline"
MAINTENANCE_LABEL = "gpuportal.io/maintenance"
# What Kubernetes adds to a cordoned node; the cordon is the node's maintenance state already.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# What the node lifecycle controller adds to a node that is not ready or does not answer; its
# Ready condition already makes it unhealthy to the portal.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
# Taints that are states the portal already reads (maintenance, health), not foreign taints a
# queue must tolerate.
LIFECYCLE_TAINTS = frozenset(
    {MAINTENANCE_TAINT, UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT}
)
HEALTHY_LABEL_VALUES = frozenset({"", "ok", "healthy", "pass", "true"})

_MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb)$")


@dataclass(frozen=True)
class Conventions:
    """Where a cluster keeps what the portal reads; the defaults follow GFD and the portal."""

    rack_label: str = "topology.kubernetes.io/rack"
    network_domain_label: str = "network.gpuportal.io/domain"
    health_labels: tuple[str, ...] = ("nvidia.com/gpu.health",)
    problem_conditions: tuple[str, ...] = (
        "GpuXidError",
        "GpuEccError",
        "NVLinkError",
        "GpuThermal",
    )


@dataclass(frozen=True)
class NodeFacts:
    """What the portal mirrors of one node (``queues.models.Node`` fields)."""

    name: str
    product: str
    gpu_count: int
    mig_layout: dict[str, int] = field(default_factory=dict)
    time_slice_replicas: int = 1
    rack: str = ""
    network_domain: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    healthy: bool = True
    health_reason: str = ""
    maintenance: str = ""  # "", "cordoned" or "draining"
    maintenance_reason: str = ""
    maintenance_until: datetime | None = None
    maintenance_deadline: datetime | None = None
    cpu_millicores: int = 0  # allocatable; 0 when the node does not say
    memory_mib: int = 0


def normalized_product(label: str) -> tuple[str, str | None]:
    """``Tesla-T4-SHARED`` → (``Tesla-T4``, None); ``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb`` →
    (``NVIDIA-A100-SXM4-80GB``, ``1g.10gb``)."""
    product = label.removesuffix("-SHARED")
    match = _MIG_SUFFIX.search(product)
    if match is None:
        return product, None
    return product[: match.start()], match["profile"]


def quantity_int(value: Any) -> int:
    """An extended-resource or count quantity as an integer (``"8"`` → 8; junk → 0)."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0


def millicores(value: Any) -> int:
    """A CPU quantity in millicores (``"16"`` → 16000, ``"15900m"`` → 15900); junk → 0."""
    try:
        return int(parse_quantity(str(value)) * 1000)
    except (TypeError, ValueError, ArithmeticError):
        return 0


def mebibytes(value: Any) -> int:
    """A memory quantity in MiB, rounded down (``"2Gi"`` → 2048); junk → 0."""
    try:
        return int(parse_quantity(str(value)) // 2**20)
    except (TypeError, ValueError, ArithmeticError):
        return 0


def node_facts(node: Mapping[str, Any], conventions: Conventions = Conventions()) -> NodeFacts:
    """Interpret one Node object (as JSON from the API)."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels: dict[str, str] = dict(metadata.get("labels") or {})
    annotations: dict[str, str] = dict(metadata.get("annotations") or {})
    allocatable: dict[str, Any] = dict(status.get("allocatable") or {})
    taints = [
        {k: str(t.get(k) or "") for k in ("key", "value", "effect")}
        for t in spec.get("taints") or []
    ]

    product, single_profile = normalized_product(labels.get(PRODUCT_LABEL, ""))
    replicas = max(1, quantity_int(labels.get(REPLICAS_LABEL, 1)))
    mig_layout = {
        key.removeprefix(MIG_RESOURCE_PREFIX): quantity_int(amount)
        for key, amount in sorted(allocatable.items())
        if key.startswith(MIG_RESOURCE_PREFIX) and quantity_int(amount) > 0
    }
    if single_profile is not None and not mig_layout:
        mig_layout = {single_profile: quantity_int(allocatable.get(GPU_RESOURCE))}
    if COUNT_LABEL in labels:
        gpu_count = quantity_int(labels[COUNT_LABEL])
    elif mig_layout:
        gpu_count = 0  # unknown without the count label; capacity comes from the slices
    else:
        gpu_count = quantity_int(allocatable.get(GPU_RESOURCE)) // replicas

    healthy, health_reason = _health(status.get("conditions") or [], labels, conventions)
    maintenance = ""
    for taint in taints:
        if taint["key"] == MAINTENANCE_TAINT:
            maintenance = "draining" if taint["effect"] == "NoExecute" else "cordoned"
    if not maintenance and spec.get("unschedulable"):
        maintenance = "cordoned"
    return NodeFacts(
        name=metadata.get("name", ""),
        product=product,
        gpu_count=gpu_count,
        mig_layout=mig_layout,
        time_slice_replicas=replicas,
        rack=labels.get(conventions.rack_label, ""),
        network_domain=labels.get(conventions.network_domain_label, ""),
        labels=labels,
        taints=taints,
        healthy=healthy,
        health_reason=health_reason,
        maintenance=maintenance,
        maintenance_reason=annotations.get(MAINTENANCE_REASON_ANNOTATION, "")
        if maintenance
        else "",
        maintenance_until=_timestamp(annotations.get(MAINTENANCE_UNTIL_ANNOTATION))
        if maintenance
        else None,
        maintenance_deadline=_timestamp(annotations.get(MAINTENANCE_DEADLINE_ANNOTATION))
        if maintenance
        else None,
        cpu_millicores=millicores(allocatable.get("cpu", 0)),
        memory_mib=mebibytes(allocatable.get("memory", 0)),
    )


def _health(
    conditions: Iterable[Mapping[str, Any]], labels: Mapping[str, str], conventions: Conventions
) -> tuple[bool, str]:
    """(healthy, why not): every problem found, joined, so a person sees all of them."""
    problems: list[str] = []
    for condition in conditions:
        kind, state = condition.get("type", ""), condition.get("status", "")
        bad = (
            (kind == "Ready" and state != "True")
            or (kind.endswith("Healthy") and state == "False")
            or (kind in conventions.problem_conditions and state == "True")
        )
        if bad:
            detail = condition.get("message") or condition.get("reason") or state
            problems.append(f"{kind}: {detail}")
    for key in conventions.health_labels:
        value = labels.get(key)
        if value is not None and value.lower() not in HEALTHY_LABEL_VALUES:
            problems.append(f"{key}={value}")
    return not problems, "; ".join(problems)


def _timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
