"""Read Pods as the API returns them (JSON dicts): who holds which GPUs, and how pods fared.

Pure functions, like ``queues.cluster.nodes``. A pod holds its GPUs from the moment it is bound
to a node until it is gone: a pod that is terminating (``deletionTimestamp`` set) still holds
them; one that has Succeeded or Failed does not.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from queues.cluster.nodes import GPU_RESOURCE, MIG_RESOURCE_PREFIX, quantity_int

JOB_ID_LABEL = "gpuportal.io/job-id"
TEAM_LABEL = "gpuportal.io/team"
QUEUE_LABEL = "gpuportal.io/queue"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class ContainerOutcome:
    """How the pod's (first) container fared, in the cluster's own words."""

    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    reason: str = ""  # Completed, Error, OOMKilled, ErrImagePull, ImagePullBackOff, …
    message: str = ""


@dataclass(frozen=True)
class PodFacts:
    name: str
    namespace: str
    uid: str
    node: str
    phase: str
    job_id: int | None
    index: int | None
    devices: dict[str, int] = field(default_factory=dict)  # "gpu" or a MIG profile → count
    terminating: bool = False
    deleted_at: datetime | None = None
    grace_seconds: int = 30
    unschedulable_message: str = ""
    container: ContainerOutcome = ContainerOutcome()

    @property
    def holds_gpus(self) -> bool:
        return bool(self.node) and bool(self.devices) and self.phase not in FINISHED_PHASES

    @property
    def from_portal(self) -> bool:
        return self.job_id is not None


def pod_devices(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPU devices a pod's containers ask for: ``{"gpu": 2}`` or ``{"1g.10gb": 1}``.

    Extended resources are set as limits (requests default to them); init containers run
    before the others, so a pod needs the larger of their largest and the others' sum.
    """
    spec = pod.get("spec") or {}

    def summed(containers: Iterable[Mapping[str, Any]]) -> Counter[str]:
        total: Counter[str] = Counter()
        for container in containers:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            for key, amount in wanted.items():
                if key == GPU_RESOURCE:
                    total["gpu"] += quantity_int(amount)
                elif key.startswith(MIG_RESOURCE_PREFIX):
                    total[key.removeprefix(MIG_RESOURCE_PREFIX)] += quantity_int(amount)
        return total

    main = summed(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        for key, amount in summed([init]).items():
            main[key] = max(main[key], amount)
    return {k: v for k, v in sorted(main.items()) if v > 0}


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    job_id = labels.get(JOB_ID_LABEL)
    index = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX))
    unschedulable = next(
        (
            c.get("message", "")
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ),
        "",
    )
    return PodFacts(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace", ""),
        uid=metadata.get("uid", ""),
        node=spec.get("nodeName") or "",
        phase=status.get("phase", "Pending"),
        job_id=int(job_id) if job_id and str(job_id).isdigit() else None,
        index=int(index) if index is not None and str(index).isdigit() else None,
        devices=pod_devices(pod),
        terminating=bool(metadata.get("deletionTimestamp")),
        deleted_at=parse_time(metadata.get("deletionTimestamp")),
        grace_seconds=int(
            metadata.get("deletionGracePeriodSeconds")
            or spec.get("terminationGracePeriodSeconds")
            or 30
        ),
        unschedulable_message=unschedulable,
        container=container_outcome(status),
    )


def container_outcome(status: Mapping[str, Any]) -> ContainerOutcome:
    statuses = status.get("containerStatuses") or []
    if not statuses:
        return ContainerOutcome()
    state = statuses[0].get("state") or {}
    last = statuses[0].get("lastState") or {}
    if "terminated" in state or "terminated" in last:
        done = state.get("terminated") or last["terminated"]
        return ContainerOutcome(
            started_at=parse_time(done.get("startedAt")),
            finished_at=parse_time(done.get("finishedAt")),
            exit_code=done.get("exitCode"),
            reason=done.get("reason", ""),
            message=done.get("message", ""),
        )
    if "running" in state:
        return ContainerOutcome(started_at=parse_time(state["running"].get("startedAt")))
    waiting = state.get("waiting") or {}
    return ContainerOutcome(reason=waiting.get("reason", ""), message=waiting.get("message", ""))


@dataclass
class NodeUse:
    """Devices held on one node, split by who holds them."""

    portal: Counter[str] = field(default_factory=Counter)
    outside: Counter[str] = field(default_factory=Counter)


def devices_held(pods: Iterable[PodFacts]) -> dict[str, NodeUse]:
    """Per node: devices held by the portal's pods and by pods the portal did not create."""
    use: dict[str, NodeUse] = defaultdict(NodeUse)
    for pod in pods:
        if pod.holds_gpus:
            (use[pod.node].portal if pod.from_portal else use[pod.node].outside).update(pod.devices)
    return dict(use)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
