"""Placement the way kube-scheduler filters nodes, and its message when nothing fits.

The filters run in kube-scheduler's default order and each node records the reasons of the first
filter that rejects it (the resource filter lists every resource that is short):

1. NodeAffinity's pre-filter: required ``matchFields`` on ``metadata.name`` narrow the candidates;
   the others are "node is filtered out by the prefilter result".
2. NodeUnschedulable: ``spec.unschedulable`` → "node(s) were unschedulable".
3. TaintToleration: the first ``NoSchedule``/``NoExecute`` taint the pod does not tolerate →
   "node(s) had untolerated taint {key: value}".
4. NodeAffinity: ``nodeSelector`` and required node affinity →
   "node(s) didn't match Pod's node affinity/selector".
5. NodeResourcesFit: requests against allocatable minus the pods bound there →
   "Insufficient nvidia.com/gpu", "Too many pods" …

A pod that fits nowhere gets kube-scheduler's ``FitError`` text: counts per reason, the reasons
sorted as strings, then the preemption post-filter's verdict (the simulation never preempts:
nodes rejected for resources have "No preemption victims found for incoming pod", the others
"Preemption is not helpful for scheduling")::

    0/8 nodes are available: 1 node(s) were unschedulable, 7 Insufficient nvidia.com/gpu.
    preemption: 0/8 nodes are available: 1 Preemption is not helpful for scheduling,
    7 No preemption victims found for incoming pod.

Among the nodes that fit, the pod goes to the one it packs tightest (least of the requested
extended resources left free, then least CPU left, then by name): GPU clusters configure
bin-packing so that whole nodes stay free for large jobs, and a fixed order keeps tests exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from simcluster.quantity import parse_resources

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_STANDARD_RESOURCES = ("pods", "cpu", "memory", "ephemeral-storage")
_PREFILTERED = "node is filtered out by the prefilter result"
_NODE_UNSCHEDULABLE = "node(s) were unschedulable"
_AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_NO_VICTIMS = "No preemption victims found for incoming pod"


@dataclass(frozen=True)
class NodeInfo:
    """What the scheduler needs of a node: the API object and what bound pods already use."""

    node: dict[str, Any]
    allocatable: dict[str, int]
    used: dict[str, int]

    @property
    def name(self) -> str:
        return self.node["metadata"]["name"]


@dataclass(frozen=True)
class Decision:
    """Either the chosen node, or ``None`` and kube-scheduler's message."""

    node: str | None
    message: str = ""


def pod_requests(pod_spec: dict[str, Any]) -> dict[str, int]:
    """The pod's effective requests: the containers' sum (or an init container's, if larger),
    with limits standing in for missing requests, plus one ``pods`` slot."""
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    for container in pod_spec.get("initContainers") or []:
        for name, amount in container_requests(container).items():
            total[name] = max(total.get(name, 0), amount)
    total["pods"] = 1000  # one pod slot, in milli-units like every other resource
    return total


def container_requests(container: dict[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    limits = parse_resources(resources.get("limits"))
    requests = parse_resources(resources.get("requests"))
    return {**limits, **requests}


def schedule(pod: dict[str, Any], nodes: Mapping[str, NodeInfo] | Iterable[NodeInfo]) -> Decision:
    """Choose a node for ``pod`` or explain, in kube-scheduler's words, why none fits.

    ``nodes`` by name (as the cluster keeps them, so a pod pinned to a few nodes looks only at
    those) or as a plain collection."""
    by_name = nodes if isinstance(nodes, Mapping) else {info.name: info for info in nodes}
    spec = pod.get("spec") or {}
    requests = pod_requests(spec)
    allowed_names = prefilter_node_names(spec)
    if allowed_names is None:
        candidates = list(by_name.values())
    else:
        candidates = [by_name[name] for name in allowed_names if name in by_name]
    # The tightest feasible node is the first feasible one in packing order; only when none is
    # feasible do all nodes need their reasons (which is then the whole answer anyway).
    for info in sorted(candidates, key=lambda info: _packing_key(info, requests)):
        if not filter_node(spec, requests, info)[0]:
            return Decision(info.name)
    reasons: dict[str, list[str]] = {}
    resolvable: dict[str, bool] = {}
    for name, info in by_name.items():
        if allowed_names is not None and name not in allowed_names:
            found, can_preempt = [_PREFILTERED], False
        else:
            found, can_preempt = filter_node(spec, requests, info)
        reasons[name] = found
        resolvable[name] = can_preempt
    return Decision(None, fit_error(len(by_name), reasons, resolvable, spec))


def filter_node(
    spec: dict[str, Any], requests: dict[str, int], info: NodeInfo
) -> tuple[list[str], bool]:
    """The reasons ``info`` rejects the pod (empty if it fits) and whether preemption could help."""
    node = info.node
    tolerations = spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not any(
        tolerates(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}) for t in tolerations
    ):
        return [_NODE_UNSCHEDULABLE], False
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return [
                f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
            ], False
    if not node_affinity_matches(spec, node):
        return [_AFFINITY_MISMATCH], False
    short = insufficient_resources(requests, info)
    return short, True


def insufficient_resources(requests: dict[str, int], info: NodeInfo) -> list[str]:
    """NodeResourcesFit's reasons: "Too many pods" and "Insufficient <resource>"."""
    reasons = []
    for name, amount in requests.items():
        if amount <= 0:
            continue
        free = info.allocatable.get(name, 0) - info.used.get(name, 0)
        if amount > free:
            reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return reasons


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def node_affinity_matches(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """``nodeSelector`` and required node affinity (terms ORed, expressions ANDed)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    return any(_term_matches(term, labels, fields) for term in terms)


def _term_matches(term: dict[str, Any], labels: dict[str, str], fields: dict[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term matches no node
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(e, fields) for e in field_expressions
    )


def _expression_matches(expression: dict[str, Any], values: dict[str, str]) -> bool:
    key, operator = str(expression.get("key")), expression.get("operator")
    wanted = expression.get("values") or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            actual, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def prefilter_node_names(spec: dict[str, Any]) -> frozenset[str] | None:
    """NodeAffinity's pre-filter: node names when *every* required term pins ``metadata.name``."""
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    )
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        pinned = [
            set(e.get("values") or [])
            for e in term.get("matchFields") or []
            if e.get("key") == "metadata.name" and e.get("operator") == "In"
        ]
        if not pinned:
            return None
        names |= set.intersection(*pinned)
    return frozenset(names)


def fit_error(
    total: int,
    reasons: dict[str, list[str]],
    resolvable: dict[str, bool],
    spec: dict[str, Any],
) -> str:
    """kube-scheduler's ``FitError.Error()`` plus the DefaultPreemption post-filter message."""
    counts: Counter[str] = Counter(reason for found in reasons.values() for reason in found)
    message = f"0/{total} nodes are available: {_histogram(counts)}."
    if spec.get("preemptionPolicy") == "Never":
        return f"{message} preemption: not eligible due to preemptionPolicy=Never."
    verdicts = Counter(_NO_VICTIMS if resolvable[name] else _NOT_HELPFUL for name in reasons)
    return f"{message} preemption: 0/{total} nodes are available: {_histogram(verdicts)}."


def _histogram(counts: Counter[str]) -> str:
    # kube-scheduler sorts the "<count> <reason>" strings, so "10 …" comes before "2 …".
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def _packing_key(info: NodeInfo, requests: dict[str, int]) -> tuple[int, int, str]:
    extended = [name for name in requests if name not in _STANDARD_RESOURCES]
    free_extended = sum(
        (info.allocatable.get(n, 0) - info.used.get(n, 0) for n in extended),
        0,
    )
    free_cpu = info.allocatable.get("cpu", 0) - info.used.get("cpu", 0)
    return free_extended, free_cpu, info.name
