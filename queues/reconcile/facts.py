"""The facts of one reconcile cycle: what it read from the cluster (``ClusterView``, by
``read_cluster``), and what it did (``CycleReport``)."""

from __future__ import annotations

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from queues.cluster.adapter import Cluster, ClusterUnreachable
from queues.cluster.mirror import ClusterMirror
from queues.cluster.nodes import Conventions, NodeFacts, node_facts
from queues.cluster.pods import PodFacts, pod_facts


@dataclass
class CycleReport:
    """What one cycle did (for the command's output, the logs, the benchmark and the tests)."""

    ran: bool = True
    unreachable: str = ""
    transitions: Counter[str] = field(default_factory=Counter)
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    jobs_created: int = 0
    jobs_deleted: int = 0
    orphans_deleted: int = 0  # pods left running by a Job deleted without its pods
    intervals_opened: int = 0
    intervals_closed: int = 0
    api_calls: int = 0
    seconds: float = 0.0
    # Where the cycle's time went: step → seconds (``step``), in the order the steps ran.
    steps: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.steps[name] = self.steps.get(name, 0.0) + time.monotonic() - started

    def changed(self) -> bool:
        """Whether the cycle changed anything in the database or the cluster."""
        return bool(
            self.transitions
            or self.admitted
            or self.preempted
            or self.jobs_created
            or self.jobs_deleted
            or self.orphans_deleted
            or self.intervals_opened
            or self.intervals_closed
        )

    def summary(self) -> str:
        if not self.ran:
            return "another reconcile holds the lease; nothing done"
        moves = ", ".join(f"{k} {v}" for k, v in sorted(self.transitions.items())) or "none"
        text = (
            f"admitted {len(self.admitted)}, preempted {len(self.preempted)}, "
            f"Jobs created {self.jobs_created}, deleted {self.jobs_deleted}, "
            f"orphaned pods deleted {self.orphans_deleted}, "
            f"usage opened {self.intervals_opened}, closed {self.intervals_closed}; "
            f"state changes: {moves}; {self.api_calls} API calls in {self.seconds:.2f} s"
        )
        if self.steps:
            text += " (" + ", ".join(f"{k} {v:.2f}" for k, v in self.steps.items()) + ")"
        return f"cluster unreachable ({self.unreachable}); " + text if self.unreachable else text


@dataclass
class ClusterView:
    """What the cluster said at the start of a cycle."""

    nodes: list[NodeFacts]
    pods: list[PodFacts]  # bound pods of anyone, and the portal's unbound ones
    jobs: dict[int, dict[str, Any]]  # the portal's Kubernetes Jobs by portal job id
    # The portal's pods deleted lately, by UID, as they last were (from the mirror; empty when
    # listing): how a pod that ended and went between two cycles ended.
    gone: dict[str, PodFacts] = field(default_factory=dict)
    _pods_of: dict[int, list[PodFacts]] | None = field(default=None, repr=False, compare=False)

    def pods_of(self) -> dict[int, list[PodFacts]]:
        """The portal's pods by job id (computed once per view: several passes read it)."""
        if self._pods_of is not None:
            return self._pods_of
        grouped: dict[int, list[PodFacts]] = defaultdict(list)
        for pod in self.pods:
            if pod.job_id is not None:
                grouped[pod.job_id].append(pod)
        self._pods_of = grouped
        return grouped


def conventions() -> Conventions:
    return Conventions(
        rack_label=settings.CLUSTER_RACK_LABEL,
        network_domain_label=settings.CLUSTER_NETWORK_DOMAIN_LABEL,
    )


@functools.cache
def _node_builder(conventions: Conventions) -> Callable[[dict[str, Any]], NodeFacts]:
    """``node_facts`` under ``conventions``, one callable per conventions: the mirror keeps a
    node's facts while its builder and resourceVersion stay the same (2,000 nodes were rebuilt
    every cycle)."""
    return functools.partial(node_facts, conventions=conventions)


def read_cluster(cluster: Cluster, mirror: ClusterMirror | None = None) -> ClusterView:
    """What the cluster has: from the watch-fed ``mirror`` (no API call), or else by listing
    (four calls, however many jobs there are). A mirror that is failing raises
    ``ClusterUnreachable`` with its error."""
    if mirror is not None:
        problem = mirror.error()
        if problem:
            raise ClusterUnreachable(problem)
        # only nodes and pods that changed are read again
        nodes = mirror.facts("nodes", _node_builder(conventions()))
        all_pods = mirror.facts("pods", pod_facts)
        raw_jobs = mirror.items("jobs")
        gone = [pod_facts(raw) for raw in mirror.gone("pods")]
    else:
        gone = []
        nodes = [node_facts(n, conventions()) for n in cluster.list_nodes().items]
        raw_pods = cluster.list_pods().items + cluster.list_portal_pods().items
        all_pods = [pod_facts(raw) for raw in raw_pods]
        raw_jobs = cluster.list_portal_jobs().items
    seen: dict[str, PodFacts] = {}
    for pod in all_pods:
        if pod.node or pod.job_id is not None:
            seen[pod.uid] = pod
    jobs: dict[int, dict[str, Any]] = {}
    for raw in raw_jobs:
        label = (raw.get("metadata", {}).get("labels") or {}).get("gpuportal.io/job-id", "")
        if label.isdigit():
            jobs[int(label)] = raw
    return ClusterView(
        nodes=nodes,
        pods=list(seen.values()),
        jobs=jobs,
        gone={p.uid: p for p in gone if p.job_id is not None and p.uid not in seen},
    )
