"""The simulated cluster: API objects plus the controllers a real cluster runs behind them.

:class:`SimCluster` plays, in one process and under one lock, the parts of Kubernetes the portal
relies on: the API server's storage and validation (through :mod:`.store` and :mod:`.objects`),
the Job controller and garbage collector, kube-scheduler (:mod:`.scheduler`) and a kubelet per
node that pulls images, runs containers for a simulated duration and ends them.

Time is a discrete-event simulation over a :class:`~simcluster.clock.Clock`: every timed
step (an image pulled, a container finished, a grace period over, a Job's deadline) is a timer.
:meth:`SimCluster.tick` fires the timers that are due, each at its own due time, so a test that
advances a manual clock by an hour sees every step stamped when it happened. Simulated durations
are divided by ``speed`` on the clock: at speed 60 a pod that runs 3600 s finishes a minute after
it started.

How long a pod runs and how it ends: see :mod:`.kubelet`. The Job controller's decisions
are in :mod:`.jobs`, events in :mod:`.events`.
"""

from __future__ import annotations

import copy
import heapq
import random
import secrets
from collections import deque
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from simcluster import provisioner
from simcluster.clock import Clock, WallClock, rfc3339
from simcluster.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    success_status,
)
from simcluster.events import EventRecorder
from simcluster.faults import Faults
from simcluster.jobs import (
    COMPLETIONS_REACHED,
    JobRun,
    add_condition,
    job_failure,
    job_status,
    job_succeeded,
    pods_to_create,
    replacement_delay,
)
from simcluster.kubelet import (
    CONFIG_RETRY_SECONDS,
    DURATION_ANNOTATION,
    PodRun,
    container_config_error,
    image_reference,
    log_waiting_reason,
    memory_limit,
    pod_status,
    run_plan,
    skipped_env_keys,
    utilization_between,
    utilization_profile,
)
from simcluster.logs import STEP_SECONDS, LogContext, log_lines, render
from simcluster.nodes import ClusterSpec, SimulationSettings, load_cluster_file
from simcluster.objects import (
    build_job,
    build_namespace,
    build_node,
    build_pod,
    build_secret,
    pod_for_job,
    sync_unschedulable_taint,
)
from simcluster.patch import apply_patch
from simcluster.quantity import format_milli, parse_resources
from simcluster.resources import RESOURCES
from simcluster.scheduler import (
    NodeInfo,
    pod_requests,
    prefilter_node_names,
    schedule,
    tolerates,
)
from simcluster.selectors import FieldSelector, LabelSelector, fields_match, labels_match
from simcluster.store import Store

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NOT_READY = "node.kubernetes.io/not-ready"
GPU_HEALTH_CONDITION = "GPUHealthy"
GPU_HEALTH_LABEL = "nvidia.com/gpu.health"
FOREIGN_NAMESPACE = "ml-sandbox"
# One series' labels and value, as the simulated DCGM exporter reports them.
UtilizationSeries = list[tuple[dict[str, str], float]]
# Deleted GPU pods whose utilization history the simulated Prometheus keeps.
GPU_HISTORY_PODS = 50_000

ORPHAN_WARNING = (
    '299 - "child pods are preserved by default when jobs are deleted; set '
    "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress "
    'this warning"'
)
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_SETTLE_ROUNDS = 10_000


class SimCluster:
    """The whole simulated cluster. Every public method is thread-safe (one lock for all).

    API-facing methods take and return JSON-ready dicts and raise
    :class:`~simcluster.errors.ApiError` as the API server would answer.
    """

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        clock: Clock | None = None,
        speed: float = 1.0,
        history_size: int = 10_000,
        max_events: int = 5_000,
        seed: int = 0,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.store = Store(history_size)
        self.lock = self.store.lock
        self.clock: Clock = clock or WallClock()
        self.speed = float(speed)
        self.settings: SimulationSettings = spec.simulation
        self.faults = Faults()
        self._moment = self.clock.now()
        self._timers: list[tuple[datetime, int, str, str, int]] = []
        self._seq = 0
        self._runs: dict[str, PodRun] = {}
        # Deleted pods that held GPUs, for the utilization history (the newest ones).
        self._gone_gpu_runs: deque[PodRun] = deque(maxlen=GPU_HISTORY_PODS)
        self._jobs: dict[str, JobRun] = {}
        self._pending: set[str] = set()
        # Resources held per node, kept as pods bind and end (not recomputed from every pod on
        # each scheduling pass, which made a write cost O(pods)).
        self._node_used: dict[str, dict[str, int]] = {}
        self._holding: set[str] = set()
        # What the scheduler sees of each node (the API object, allocatable parsed once per
        # version, and the live usage dict above), replaced only when the node changes.
        self._node_infos: dict[str, NodeInfo] = {}
        # kube-scheduler's queueing hints, simplified: a pod that fitted nowhere is tried again
        # only once a node it may go to has changed or freed resources since its last attempt.
        # Every such change takes the next epoch; ``_node_epochs`` holds each node's latest.
        self._epoch = 0
        self._node_epochs: dict[str, int] = {}
        self._dirty_jobs: set[str] = set()
        self._schedule_dirty = False
        self.events = EventRecorder(self.store, max_events)
        # the node pools' provisioner (simcluster.provisioner): seeded, so tests replay exactly
        self.pools = {pool.name: pool for pool in spec.pools}
        self.provision_random = random.Random(seed)
        self.pool_counters: dict[str, int] = {}
        self.provisioning_failures_armed = 0
        self._node_numbers: dict[str, int] = {}
        self._pod_ip_counters: dict[str, int] = {}
        with self.lock:
            for name in SYSTEM_NAMESPACES:
                self.store.put(
                    "namespaces", build_namespace({"metadata": {"name": name}}, self._moment)
                )
            for number, node_spec in enumerate(spec.nodes):
                self._node_numbers[node_spec.name] = number
                node = self.store.put("nodes", build_node(node_spec, number, self._moment))
                self._node_used[node_spec.name] = {}
                self._node_infos[node_spec.name] = self._node_info(node)

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> SimCluster:
        """A cluster with the nodes of a cluster file (see :mod:`.nodes`)."""
        return cls(load_cluster_file(path), **options)

    # --- reading -----------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """One object (404 ``NotFound`` when it does not exist)."""
        with self.lock:
            self._settle()
            obj = self.store.get(resource, namespace, name)
            if obj is None:
                raise not_found(resource, name, RESOURCES[resource].group)
            return obj

    def list(
        self,
        resource: str,
        namespace: str | None,
        labels: LabelSelector = (),
        fields: FieldSelector = (),
    ) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by namespace/name, and the resourceVersion they are as of."""
        with self.lock:
            self._settle()
            items = [
                obj
                for obj in self.store.items(resource, namespace)
                if labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)
            ]
            return items, self.store.revision

    def now(self) -> datetime:
        return self.clock.now()

    # --- time --------------------------------------------------------------------------------

    def tick(self) -> None:
        """Bring the simulation up to the clock's now (the server's ticker calls this)."""
        with self.lock:
            self._settle()

    def advance(self, seconds: float) -> None:
        """Move the clock forward ``seconds`` and play everything that happens meanwhile."""
        with self.lock:
            self.clock.advance(seconds)
            self._settle()

    # --- namespaces ----------------------------------------------------------------------------

    def create_namespace(self, body: Any, *, dry_run: bool = False) -> dict[str, Any]:
        with self.lock:
            self._settle()
            namespace = build_namespace(body, self._moment)
            name = namespace["metadata"]["name"]
            if self.store.get("namespaces", "", name) is not None:
                raise already_exists("namespaces", name)
            if dry_run:
                return namespace
            return self.store.put("namespaces", namespace)

    def _require_namespace(self, namespace: str) -> None:
        if self.store.get("namespaces", "", namespace) is None:
            raise not_found("namespaces", namespace)

    # --- secrets -------------------------------------------------------------------------------

    def create_secret(self, namespace: str, body: Any, *, dry_run: bool = False) -> dict[str, Any]:
        """Create a ``Secret``. A pod waiting for it (``CreateContainerConfigError``) starts at
        the kubelet's next try, as on a real node."""
        with self.lock:
            self._settle()
            secret = build_secret(namespace, body, self._moment, _name_suffix())
            self._require_namespace(namespace)
            name = secret["metadata"]["name"]
            if self.store.get("secrets", namespace, name) is not None:
                raise already_exists("secrets", name)
            if dry_run:
                return secret
            return self.store.put("secrets", secret)

    def delete_secret(self, namespace: str, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete a ``Secret`` at once (a ``Success`` Status). Running containers keep the
        environment they started with; pods that start later find it missing."""
        with self.lock:
            self._settle()
            secret = self.store.get("secrets", namespace, name)
            if secret is None:
                raise not_found("secrets", name)
            if not dry_run:
                self.store.remove("secrets", namespace, name)
            return success_status(
                name=name, group="", kind="secrets", uid=secret["metadata"]["uid"]
            )

    # --- jobs --------------------------------------------------------------------------------

    def create_job(self, namespace: str, body: Any, *, dry_run: bool = False) -> dict[str, Any]:
        """Create a ``batch/v1`` Job; its pods appear (and are scheduled) before this returns."""
        with self.lock:
            self._settle()
            job = build_job(namespace, body, self._moment, _name_suffix())
            self._require_namespace(namespace)
            name = job["metadata"]["name"]
            if self.store.get("jobs", namespace, name) is not None:
                raise already_exists("jobs", name, "batch")
            if dry_run:
                return job
            job = self.store.put("jobs", job)
            uid = job["metadata"]["uid"]
            self._jobs[uid] = JobRun(uid, namespace, name)
            self._dirty_jobs.add(uid)
            self._settle()
            return self.store.get("jobs", namespace, name) or job

    def delete_job(
        self,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], str | None]:
        """Delete a Job. Returns the answer body and the ``Warning`` header to send, if any.

        Without ``propagation`` a ``batch/v1`` Job is deleted with ``Orphan``, as on a real API
        server (its pods keep running, and the answer carries a warning). ``Background`` removes
        the Job at once and then deletes its pods gracefully; ``Foreground`` keeps the Job, marked
        deleting, until its pods are gone.
        """
        with self.lock:
            self._settle()
            job = self.store.get("jobs", namespace, name)
            if job is None:
                raise not_found("jobs", name, "batch")
            warning = ORPHAN_WARNING if propagation is None else None
            policy = propagation or "Orphan"
            uid = job["metadata"]["uid"]
            if dry_run:
                return job, warning
            run = self._jobs.get(uid)
            if policy == "Foreground":
                return self._delete_job_foreground(job, run), warning
            pods = [self._runs[pod_uid] for pod_uid in sorted(run.pods)] if run else []
            self.store.remove("jobs", namespace, name)
            self._jobs.pop(uid, None)
            self._dirty_jobs.discard(uid)
            for pod_run in pods:
                pod_run.job_uid = None
                if policy == "Background":
                    self._delete_pod(pod_run, None)
                else:
                    self._orphan(pod_run)
            self._settle()
            return success_status(name=name, group="batch", kind="jobs", uid=uid), warning

    def _delete_job_foreground(self, job: dict[str, Any], run: JobRun | None) -> dict[str, Any]:
        metadata = job["metadata"]
        if metadata.get("deletionTimestamp"):
            return job
        marked = {
            **job,
            "metadata": {
                **metadata,
                "deletionTimestamp": rfc3339(self._moment),
                "deletionGracePeriodSeconds": 0,
                "finalizers": [*(metadata.get("finalizers") or []), "foregroundDeletion"],
            },
        }
        marked = self.store.put("jobs", marked)
        if run is not None:
            run.foreground_deletion = True
            for pod_uid in sorted(run.pods):
                self._delete_pod(self._runs[pod_uid], None)
            self._finish_foreground_deletion(run)
        self._settle()
        return self.store.get("jobs", metadata["namespace"], metadata["name"]) or marked

    def _finish_foreground_deletion(self, run: JobRun) -> None:
        if run.foreground_deletion and not run.pods:
            self.store.remove("jobs", run.namespace, run.name)
            self._jobs.pop(run.uid, None)

    def _orphan(self, run: PodRun) -> None:
        pod = self._pod(run)
        metadata = {k: v for k, v in pod["metadata"].items() if k != "ownerReferences"}
        self.store.put("pods", {**pod, "metadata": metadata})

    # --- pods --------------------------------------------------------------------------------

    def create_pod(self, namespace: str, body: Any, *, dry_run: bool = False) -> dict[str, Any]:
        """Create a bare pod (as someone outside the portal would); it is scheduled at once."""
        with self.lock:
            self._settle()
            pod = build_pod(namespace, body, self._moment, _name_suffix())
            self._require_namespace(namespace)
            name = pod["metadata"]["name"]
            if self.store.get("pods", namespace, name) is not None:
                raise already_exists("pods", name)
            if dry_run:
                return pod
            self._add_pod(pod, job_uid=None, index=None)
            self._settle()
            return self.store.get("pods", namespace, name) or pod

    def delete_pod(
        self, namespace: str, name: str, *, grace_seconds: int | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Delete a pod gracefully (or at once with grace 0); returns the pod as it now is."""
        with self.lock:
            self._settle()
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise not_found("pods", name)
            if dry_run:
                return pod
            result = self._delete_pod(self._runs[pod["metadata"]["uid"]], grace_seconds)
            self._settle()
            return result

    def pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        timestamps: bool = False,
        limit_bytes: int | None = None,
        previous: bool = False,
    ) -> str:
        """The ``log`` subresource: the container's lines so far (400 while it has not started)."""
        with self.lock:
            self._settle()
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise not_found("pods", name)
            names = [c["name"] for c in pod["spec"]["containers"]]
            if container is None:
                if len(names) > 1:
                    raise bad_request(
                        f"a container name must be specified for pod {name}, choose one of: "
                        f"[{' '.join(names)}]"
                    )
                container = names[0]
            elif container not in names:
                raise bad_request(f"container {container} is not valid for pod {name}")
            if previous:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            run = self._runs[pod["metadata"]["uid"]]
            if run.started_at is None:
                raise bad_request(
                    f'container "{container}" in pod "{name}" is waiting to start: '
                    f"{log_waiting_reason(run)}"
                )
            end = run.finished_at or self._moment
            context = LogContext(
                pod=pod,
                node=self.store.get("nodes", "", run.node or ""),
                container=container,
                started_at=run.started_at,
                real_seconds_per_step=STEP_SECONDS / self.speed,
                elapsed_seconds=(end - run.started_at).total_seconds() * self.speed,
                exit_code=run.final_exit_code,
                reason=run.final_reason,
                finished_at=run.finished_at,
            )
            return render(
                log_lines(context), timestamps=timestamps, tail=tail_lines, limit_bytes=limit_bytes
            )

    # --- nodes -------------------------------------------------------------------------------

    def patch_node(
        self,
        name: str,
        patch: Any,
        content_type: str,
        *,
        status: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch a node (``status``: its status subresource). Changes to the other half are
        ignored, as on a real API server; a stale ``metadata.resourceVersion`` is a 409."""
        with self.lock:
            self._settle()
            node = self.store.get("nodes", "", name)
            if node is None:
                raise not_found("nodes", name)
            patched = apply_patch(node, patch, content_type)
            result = self._patched_node(node, patched, status)
            if dry_run:
                return result
            if _same_object(result, node):
                return node  # a patch that changes nothing does not bump the resourceVersion
            result = self.store.put("nodes", result)
            self._node_changed(result)
            if provisioner.removal_asked(result) and not provisioner.removal_asked(node):
                self._after(0.0, "scale-down", name)
            self._settle()
            return self.store.get("nodes", "", name) or result

    def _patched_node(self, node: dict[str, Any], patched: Any, status: bool) -> dict[str, Any]:
        name = node["metadata"]["name"]
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise invalid("Node", name, "", [("metadata", "Required value")])
        metadata = patched["metadata"]
        if metadata.get("name") != name:
            raise invalid(
                "Node",
                name,
                "",
                [("metadata.name", f'Invalid value: "{metadata.get("name")}": field is immutable')],
            )
        wanted_version = metadata.get("resourceVersion")
        if wanted_version and wanted_version != node["metadata"]["resourceVersion"]:
            raise conflict("nodes", name)
        _validate_node(patched)
        if status:
            result = {**node, "status": patched.get("status") or {}}
        else:
            immutable = {k: node["metadata"][k] for k in ("uid", "creationTimestamp", "name")}
            result = {
                **patched,
                "metadata": {**metadata, **immutable},
                "status": node["status"],
            }
        return sync_unschedulable_taint(copy.deepcopy(result), self._moment)

    def _node_changed(self, node: dict[str, Any]) -> None:
        """Capacity or placement rules may have changed: reschedule, and evict what a new
        ``NoExecute`` taint no longer tolerates (the taint manager's job)."""
        name = node["metadata"]["name"]
        self._node_infos[name] = self._node_info(node)
        self._capacity_changed(name)
        self._schedule_dirty = True
        no_execute = [t for t in node["spec"].get("taints") or [] if t.get("effect") == "NoExecute"]
        if not no_execute:
            return
        for run in list(self._runs.values()):
            if run.node != name or run.deleting or run.finished_at is not None:
                continue
            pod = self._pod(run)
            tolerations = pod["spec"].get("tolerations") or []
            if all(any(tolerates(t, taint) for t in tolerations) for taint in no_execute):
                continue
            self._event(
                pod,
                "TaintManagerEviction",
                f"Marking for deletion Pod {run.namespace}/{run.name}",
                component="taint-eviction-controller",
            )
            self._delete_pod(run, None)

    # --- node pools ----------------------------------------------------------------------------

    def create_provisioning_request(
        self, namespace: str, body: Any, *, dry_run: bool = False
    ) -> dict[str, Any]:
        with self.lock:
            self._settle()
            return provisioner.create_request(self, namespace, body, dry_run=dry_run)

    def delete_provisioning_request(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            self._settle()
            return provisioner.delete_request(self, namespace, name)

    def fail_provisioning(self, count: int = 1) -> None:
        """The next ``count`` provisioning requests fail (a fault)."""
        with self.lock:
            self.provisioning_failures_armed += count

    # --- simulation-only operations (faults) ----------------------------------------------------

    def set_node_health(
        self,
        name: str,
        *,
        healthy: bool,
        reason: str = "ECCErrors",
        message: str = "double-bit ECC errors on GPU 2",
        label_value: str = "ecc-errors",
        taint: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Turn a node's GPUs unhealthy (or healthy again), as a GPU health monitor would: the
        ``GPUHealthy`` condition, the ``nvidia.com/gpu.health`` label and optionally a taint.
        Watchers see one MODIFIED event."""
        with self.lock:
            self._settle()
            node = self.store.get("nodes", "", name)
            if node is None:
                raise not_found("nodes", name)
            updated = copy.deepcopy(node)
            stamp = rfc3339(self._moment)
            condition = {
                "type": GPU_HEALTH_CONDITION,
                "status": "True" if healthy else "False",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
                "reason": "GPUsHealthy" if healthy else reason,
                "message": "all GPUs healthy" if healthy else message,
            }
            conditions = [
                c for c in updated["status"]["conditions"] if c["type"] != GPU_HEALTH_CONDITION
            ]
            updated["status"]["conditions"] = [*conditions, condition]
            labels = updated["metadata"].setdefault("labels", {})
            if healthy:
                labels.pop(GPU_HEALTH_LABEL, None)
            else:
                labels[GPU_HEALTH_LABEL] = label_value
            if taint is not None:
                taints = [
                    t for t in updated["spec"].get("taints") or [] if t["key"] != taint["key"]
                ]
                if not healthy:
                    taints.append(dict(taint))
                updated["spec"]["taints"] = taints
            node = self.store.put("nodes", updated)
            self._event(
                node,
                "GPUHealthy" if healthy else "GPUUnhealthy",
                condition["message"],
                type="Normal" if healthy else "Warning",
                component="gpu-health-monitor",
                host=name,
            )
            self._node_changed(node)
            self._settle()
            return node

    def set_node_ready(self, name: str, *, ready: bool) -> dict[str, Any]:
        """The kubelet stops (or resumes) posting status: the ``Ready`` condition turns False
        (or True), and the node lifecycle controller's ``node.kubernetes.io/not-ready`` taints
        follow, NoSchedule and NoExecute, as on a real control plane. Watchers see one MODIFIED
        event."""
        with self.lock:
            self._settle()
            node = self.store.get("nodes", "", name)
            if node is None:
                raise not_found("nodes", name)
            updated = copy.deepcopy(node)
            stamp = rfc3339(self._moment)
            conditions = [c for c in updated["status"]["conditions"] if c["type"] != "Ready"]
            conditions.append(
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status"
                    if ready
                    else "container runtime is down",
                }
            )
            updated["status"]["conditions"] = conditions
            taints = [t for t in updated["spec"].get("taints") or [] if t["key"] != NOT_READY]
            if not ready:
                taints += [
                    {"key": NOT_READY, "effect": "NoSchedule", "timeAdded": stamp},
                    {"key": NOT_READY, "effect": "NoExecute", "timeAdded": stamp},
                ]
            updated["spec"]["taints"] = taints
            node = self.store.put("nodes", updated)
            self._event(
                node,
                "NodeReady" if ready else "NodeNotReady",
                f"Node {name} status is now: {'NodeReady' if ready else 'NodeNotReady'}",
                type="Normal",
                component="node-controller",
            )
            self._node_changed(node)
            self._settle()
            return node

    def oom_kill(self, namespace: str, name: str) -> dict[str, Any]:
        """Kill a running pod's containers for memory now (``OOMKilled``, exit code 137)."""
        with self.lock:
            self._settle()
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise not_found("pods", name)
            run = self._runs[pod["metadata"]["uid"]]
            if not run.running or run.deleting:
                raise ApiError(409, f'pod "{name}" is not running', reason="Conflict")
            self._finish(run, 137, "OOMKilled")
            self._settle()
            return self._pod(run)

    def create_foreign_pod(
        self,
        *,
        gpus: int = 1,
        resource: str = "nvidia.com/gpu",
        node: str | None = None,
        namespace: str = FOREIGN_NAMESPACE,
        name: str | None = None,
        duration_seconds: float | None = None,
        image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
    ) -> dict[str, Any]:
        """A GPU pod someone created outside the portal (no portal labels, no owner). It holds
        its GPUs until deleted, or for ``duration_seconds``."""
        with self.lock:
            if self.store.get("namespaces", "", namespace) is None:
                self.store.put(
                    "namespaces", build_namespace({"metadata": {"name": namespace}}, self._moment)
                )
            metadata: dict[str, Any] = {
                "labels": {"app": "notebook", "owner": "someone-else"},
                "annotations": {
                    DURATION_ANNOTATION: "inf"
                    if duration_seconds is None
                    else str(duration_seconds)
                },
            }
            if name:
                metadata["name"] = name
            else:
                metadata["generateName"] = "notebook-"
            spec: dict[str, Any] = {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "notebook",
                        "image": image,
                        "resources": {"limits": {resource: str(gpus), "cpu": "2", "memory": "8Gi"}},
                    }
                ],
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            }
            if node:
                spec["nodeSelector"] = {"kubernetes.io/hostname": node}
            return self.create_pod(namespace, {"metadata": metadata, "spec": spec})

    def gpu_utilization(self, at: datetime, window_seconds: float | None) -> UtilizationSeries:
        """What NVIDIA's DCGM exporter would report for each pod holding GPUs: its GPU
        utilization (percent) at ``at``, or averaged over the ``window_seconds`` before ``at``
        while it ran (pods that did not run then have no series). Labels as the exporter puts
        them on ``DCGM_FI_DEV_GPU_UTIL``; one series per pod (its first GPU)."""
        with self.lock:
            self._settle()
            series = []
            for run in [*self._runs.values(), *self._gone_gpu_runs]:
                if run.started_at is None or run.node is None:
                    continue
                if not any(r.startswith("nvidia.com/") and v > 0 for r, v in run.requests.items()):
                    continue
                end = min(run.finished_at or at, at)
                begin = (
                    run.started_at
                    if window_seconds is None
                    else max(run.started_at, at - timedelta(seconds=window_seconds))
                )
                if window_seconds is None:
                    if (
                        not run.started_at
                        <= at
                        < (run.finished_at or datetime.max.replace(tzinfo=at.tzinfo))
                    ):
                        continue
                    since = (at - run.started_at).total_seconds() * self.speed
                    value = utilization_between(run.utilization, since, since)
                else:
                    if end <= begin:
                        continue
                    value = utilization_between(
                        run.utilization,
                        (begin - run.started_at).total_seconds() * self.speed,
                        (end - run.started_at).total_seconds() * self.speed,
                    )
                labels = {
                    "gpu": "0",
                    "Hostname": run.node,
                    "namespace": run.namespace,
                    "pod": run.name,
                }
                series.append((labels, value))
            return series

    def expire_watches(self) -> None:
        """Compact the history: a watch from any resourceVersion before now gets 410 Expired."""
        with self.lock:
            self.store.compact()

    def summary(self) -> dict[str, Any]:
        """A plain overview for ``GET /sim/state`` and for people: time, speed, nodes, pods."""
        with self.lock:
            self._settle()
            usage = self._usage()
            nodes = []
            for node in self.store.items("nodes"):
                name = node["metadata"]["name"]
                allocatable = parse_resources(node["status"]["allocatable"])
                nodes.append(
                    {
                        "name": name,
                        "unschedulable": bool(node["spec"].get("unschedulable")),
                        "resources": {
                            resource: {
                                "allocatable": format_milli(amount),
                                "used": format_milli(usage.get(name, {}).get(resource, 0)),
                            }
                            for resource, amount in sorted(allocatable.items())
                            if resource.startswith("nvidia.com/")
                        },
                    }
                )
            phases: dict[str, int] = {}
            for pod in self.store.items("pods"):
                phase = pod["status"].get("phase", "Unknown")
                phases[phase] = phases.get(phase, 0) + 1
            return {
                "now": rfc3339(self.clock.now()),
                "speed": self.speed,
                "resourceVersion": self.store.revision,
                "nodes": nodes,
                "pods": phases,
                "jobs": self.store.count("jobs"),
            }

    # --- the settle loop -----------------------------------------------------------------------

    def _settle(self) -> None:
        """Play every due timer at its own time, reacting after each, up to the clock's now."""
        target = self.clock.now()
        for _ in range(_MAX_SETTLE_ROUNDS):
            self._react()
            if not self._timers or self._timers[0][0] > target:
                break
            due, _, action, uid, token = heapq.heappop(self._timers)
            self._moment = max(self._moment, due)
            self._fire(action, uid, token)
        self._moment = max(self._moment, target)
        self._react()

    def _react(self) -> None:
        """What controllers do without waiting: sync Jobs, schedule pending pods."""
        for _ in range(_MAX_SETTLE_ROUNDS):
            if self._dirty_jobs:
                for uid in sorted(self._dirty_jobs):
                    self._dirty_jobs.discard(uid)
                    if uid in self._jobs:
                        self._sync_job(self._jobs[uid])
                continue
            if self._schedule_dirty:
                self._schedule_dirty = False
                self._schedule_pending()
                continue
            return

    def _after(self, sim_seconds: float, action: str, uid: str, token: int = 0) -> None:
        self._at(self._moment + timedelta(seconds=sim_seconds / self.speed), action, uid, token)

    def _at(self, due: datetime, action: str, uid: str, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (due, self._seq, action, uid, token))

    def _step(self, run: PodRun, sim_seconds: float, action: str) -> None:
        """Schedule the pod's next kubelet step, cancelling any other step it had pending."""
        run.token += 1
        self._after(sim_seconds, action, run.uid, run.token)

    def _fire(self, action: str, uid: str, token: int) -> None:
        if action == "provision":
            provisioner.provision_node(self, uid)
            return
        if action == "provision-fail":
            provisioner.fail_request(self, uid)
            return
        if action == "scale-down":
            provisioner.remove_when_empty(self, uid)
            return
        if action == "job":
            if uid in self._jobs:
                self._dirty_jobs.add(uid)
            return
        run = self._runs.get(uid)
        if run is None or run.token != token:
            return  # the pod is gone or has moved on to another step
        if action == "pull":
            self._pull(run)
        elif action == "backoff":
            self._image_backoff(run)
        elif action == "config":
            self._config_retry(run)
        elif action == "finish":
            exit_code = 137 if run.oom else run.exit_code
            self._finish(run, exit_code, "OOMKilled" if run.oom else None)
        elif action == "remove":
            self._remove_pod(run)

    # --- scheduling --------------------------------------------------------------------------

    def _usage(self) -> dict[str, dict[str, int]]:
        """Resources held per node: bound pods that have not finished (terminating ones too)."""
        return {node: dict(used) for node, used in self._node_used.items()}

    def _hold(self, run: PodRun) -> None:
        """``run`` now holds its requests on its node (once)."""
        if run.uid in self._holding or run.node is None:
            return
        self._holding.add(run.uid)
        used = self._node_used.setdefault(run.node, {})
        for resource, amount in run.requests.items():
            used[resource] = used.get(resource, 0) + amount

    def _release(self, run: PodRun) -> None:
        """``run`` no longer holds anything (once)."""
        if run.uid not in self._holding or run.node is None:
            return
        self._holding.discard(run.uid)
        used = self._node_used.get(run.node, {})
        for resource, amount in run.requests.items():
            used[resource] = used.get(resource, 0) - amount
        self._capacity_changed(run.node)

    def _node_info(self, node: dict[str, Any]) -> NodeInfo:
        name = node["metadata"]["name"]
        allocatable = parse_resources(node["status"].get("allocatable"))
        return NodeInfo(node, allocatable, self._node_used.setdefault(name, {}))

    def _capacity_changed(self, node_name: str) -> None:
        """``node_name`` freed resources or changed: pods that fitted nowhere may fit now."""
        self._epoch += 1
        self._node_epochs[node_name] = self._epoch

    def _worth_trying(self, run: PodRun) -> bool:
        """Whether scheduling ``run`` can come out differently than on its last attempt: it was
        never tried, or a node it may go to changed since (kube-scheduler's queueing hints)."""
        if run.tried_at is None:
            return True
        if run.candidates is None:
            return self._epoch > run.tried_at
        return any(self._node_epochs.get(name, 0) > run.tried_at for name in run.candidates)

    def _schedule_pending(self) -> None:
        queue = sorted(
            (run for uid in self._pending if self._worth_trying(run := self._runs[uid])),
            key=lambda r: (-r.priority, r.created_at, r.namespace, r.name),
        )
        for run in queue:
            pod = self._pod(run)
            preset = pod["spec"].get("nodeName")
            if preset:
                self._admit_preset(run, preset, self._node_infos.get(preset))
                continue
            decision = schedule(pod, self._node_infos)
            if decision.node is None:
                run.tried_at = self._epoch
                self._mark_unschedulable(run, pod, decision.message)
                continue
            self._bind(run, decision.node)  # holds its requests: the next pod sees them used

    def _admit_preset(self, run: PodRun, node_name: str, info: NodeInfo | None) -> str | None:
        """A pod created with ``spec.nodeName`` skips the scheduler: the kubelet admits it, or
        rejects it (phase Failed, reason ``OutOf<resource>``) when the node lacks room. A pod
        for a node that does not exist stays Pending. Returns the node if the pod now holds it."""
        self._pending.discard(run.uid)
        if info is None:
            return None
        for resource, amount in run.requests.items():
            capacity = info.allocatable.get(resource, 0)
            used = info.used.get(resource, 0)
            if amount > 0 and amount + used > capacity:
                run.node, run.bound_at = node_name, self._moment
                run.finished_at = self._moment
                run.rejection = (
                    f"OutOf{resource}",
                    f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
                    f"{format_milli(amount)}, used: {format_milli(used)}, capacity: "
                    f"{format_milli(capacity)}",
                )
                self._refresh(run)
                self._schedule_dirty = True
                self._count_for_job(run, succeeded=False)
                return None
        self._bind(run, node_name, by_scheduler=False)
        return node_name

    def _mark_unschedulable(self, run: PodRun, pod: dict[str, Any], message: str) -> None:
        if run.unschedulable_since is None:
            run.unschedulable_since = self._moment
        changed = message != run.unschedulable_message
        run.unschedulable_message = message
        if changed:
            self._refresh(run)
        self._event(
            self._pod(run),
            "FailedScheduling",
            message,
            type="Warning",
            component="default-scheduler",
        )

    def _bind(self, run: PodRun, node_name: str, *, by_scheduler: bool = True) -> None:
        self._pending.discard(run.uid)
        run.node = node_name
        run.bound_at = self._moment
        self._hold(run)
        run.unschedulable_message = ""
        number = self._node_numbers.get(node_name, 0)
        self._pod_ip_counters[node_name] = self._pod_ip_counters.get(node_name, 1) % 253 + 1
        run.pod_ip = f"10.244.{number}.{self._pod_ip_counters[node_name] + 1}"
        pod = self._pod(run)
        spec = {**pod["spec"], "nodeName": node_name}
        pod = self.store.put("pods", {**pod, "spec": spec, "status": self._status(run, pod)})
        if by_scheduler:
            self._event(
                pod,
                "Scheduled",
                f"Successfully assigned {run.namespace}/{run.name} to {node_name}",
                component="default-scheduler",
            )
        self._step(run, self.settings.image_pull_seconds, "pull")

    # --- the kubelet -------------------------------------------------------------------------

    def _add_pod(self, pod: dict[str, Any], *, job_uid: str | None, index: int | None) -> PodRun:
        pod = self.store.put("pods", pod)
        metadata, spec = pod["metadata"], pod["spec"]
        duration, exit_code, oom = run_plan(pod, self.settings)
        run = PodRun(
            utilization=utilization_profile(pod, self.settings),
            uid=metadata["uid"],
            namespace=metadata["namespace"],
            name=metadata["name"],
            requests=pod_requests(spec),
            duration=duration,
            exit_code=exit_code,
            oom=oom,
            job_uid=job_uid,
            index=index,
            created_at=self._moment,
            priority=int(spec.get("priority") or 0),
            candidates=prefilter_node_names(spec),
        )
        self._runs[run.uid] = run
        self._pending.add(run.uid)
        self._schedule_dirty = True
        if job_uid is not None:
            self._jobs[job_uid].pods.add(run.uid)
        return run

    def _pod(self, run: PodRun) -> dict[str, Any]:
        pod = self.store.get("pods", run.namespace, run.name)
        assert pod is not None, f"pod {run.namespace}/{run.name} vanished from the store"
        return pod

    def _refresh(self, run: PodRun, **metadata: Any) -> dict[str, Any]:
        """Store the pod with its status derived from ``run`` (and metadata changes), if changed."""
        pod = self._pod(run)
        status = self._status(run, pod)
        if status == pod["status"] and not metadata:
            return pod
        new_metadata = {**pod["metadata"], **metadata} if metadata else pod["metadata"]
        return self.store.put("pods", {**pod, "metadata": new_metadata, "status": status})

    def _pull(self, run: PodRun) -> None:
        pod = self._pod(run)
        containers = pod["spec"]["containers"]
        failing = [c for c in containers if self.faults.image_fails(c["image"])]
        for container in containers:
            self._container_event(
                pod, container, "Pulling", f'Pulling image "{container["image"]}"'
            )
        if failing:
            self._image_pull_failed(run, pod, failing[0])
            return
        for container in containers:
            self._container_event(
                pod,
                container,
                "Pulled",
                f'Successfully pulled image "{container["image"]}" in 1.204s (1.204s including '
                "waiting). Image size: 3456789012 bytes.",
            )
        self._start_containers(run, pod)

    def _config_retry(self, run: PodRun) -> None:
        """The kubelet's next try at a pod whose containers it could not configure."""
        pod = self._pod(run)
        for container in pod["spec"]["containers"]:
            self._container_event(
                pod,
                container,
                "Pulled",
                f'Container image "{container["image"]}" already present on machine',
            )
        self._start_containers(run, pod)

    def _start_containers(self, run: PodRun, pod: dict[str, Any]) -> None:
        """Make each container's configuration, then create and start them. A Secret or key
        their environment needs that does not exist leaves them waiting with
        ``CreateContainerConfigError`` (pod ``Pending``, its resources held), tried again every
        ``CONFIG_RETRY_SECONDS``: the pod starts once the Secret is there."""
        containers = pod["spec"]["containers"]
        namespace = run.namespace

        def secret(name: str) -> dict[str, Any] | None:
            return self.store.get("secrets", namespace, name)

        for container in containers:
            error = container_config_error(container, namespace, secret)
            if error is not None:
                run.config_error = error
                self._refresh(run)
                self._container_event(pod, container, "Failed", f"Error: {error}", "Warning")
                self._step(run, CONFIG_RETRY_SECONDS, "config")
                return
        run.config_error = ""
        run.started_at = self._moment
        for container in containers:
            for source in container.get("envFrom") or []:
                found = secret((source.get("secretRef") or {}).get("name", ""))
                if found is not None and (skipped := skipped_env_keys(found)):
                    self._event(
                        pod,
                        "InvalidEnvironmentVariableNames",
                        f"Keys [{', '.join(skipped)}] from the EnvFrom secret {namespace}/"
                        f"{found['metadata']['name']} were skipped since they are considered "
                        "invalid environment variable names.",
                        type="Warning",
                    )
        for container in containers:
            image = container["image"]
            run.container_ids[container["name"]] = "containerd://" + secrets.token_hex(32)
            run.image_ids[container["name"]] = (
                f"{image_reference(image)}@sha256:{secrets.token_hex(32)}"
            )
        for container in containers:
            self._container_event(
                pod, container, "Created", f"Created container: {container['name']}"
            )
            self._container_event(
                pod, container, "Started", f"Started container {container['name']}"
            )
        self._refresh(run)
        if run.duration is not None:
            self._step(run, run.duration, "finish")
        else:
            run.token += 1

    def _image_pull_failed(
        self, run: PodRun, pod: dict[str, Any], container: dict[str, Any]
    ) -> None:
        run.pull_failures += 1
        image = container["image"]
        reference = image_reference(image)
        detail = (
            f'failed to pull and unpack image "{reference}": failed to resolve reference '
            f'"{reference}": {reference}: not found'
        )
        run.waiting_reason = "ErrImagePull"
        run.waiting_message = detail
        self._refresh(run)
        self._container_event(
            pod,
            container,
            "Failed",
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = {detail}',
            "Warning",
        )
        self._container_event(pod, container, "Failed", "Error: ErrImagePull", "Warning")
        self._step(run, 1.0, "backoff")

    def _image_backoff(self, run: PodRun) -> None:
        pod = self._pod(run)
        containers = pod["spec"]["containers"]
        # The failing image decides; if its fault was cleared meanwhile, the next pull succeeds.
        container = next(
            (c for c in containers if self.faults.image_fails(c["image"])), containers[0]
        )
        image = container["image"]
        run.waiting_reason = "ImagePullBackOff"
        run.waiting_message = f'Back-off pulling image "{image}"'
        self._refresh(run)
        self._container_event(pod, container, "BackOff", f'Back-off pulling image "{image}"')
        self._container_event(pod, container, "Failed", "Error: ImagePullBackOff", "Warning")
        # The kubelet's image pull back-off: 10 s, doubling, at most 5 minutes.
        self._step(run, min(10.0 * 2 ** (run.pull_failures - 1), 300.0), "pull")

    def _finish(self, run: PodRun, exit_code: int, reason: str | None) -> None:
        run.token += 1
        run.finished_at = self._moment
        self._release(run)
        run.final_exit_code = exit_code
        run.final_reason = reason or ("Completed" if exit_code == 0 else "Error")
        pod = self._refresh(run)
        if run.final_reason == "OOMKilled":
            limit = memory_limit(pod)
            self._event(
                pod,
                "OOMKilled",
                f"Container {pod['spec']['containers'][0]['name']} was OOM-killed (exit code 137)"
                + (f": memory limit {limit} exceeded" if limit else ""),
                type="Warning",
            )
        self._schedule_dirty = True
        self._count_for_job(run, succeeded=exit_code == 0)

    def _delete_pod(self, run: PodRun, grace_seconds: int | None) -> dict[str, Any]:
        pod = self._pod(run)
        grace = grace_seconds
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if run.node is None or run.finished_at is not None or grace == 0:
            return self._remove_pod(run)
        deadline = self._moment + timedelta(seconds=grace / self.speed)
        current = pod["metadata"].get("deletionTimestamp")
        if run.deleting and current and rfc3339(deadline) >= current:
            return pod  # a second delete may shorten the grace period, never lengthen it
        first = not run.deleting
        run.deleting = True
        pod = self._refresh(
            run, deletionTimestamp=rfc3339(deadline), deletionGracePeriodSeconds=grace
        )
        if first and run.started_at is not None:
            for container in pod["spec"]["containers"]:
                self._container_event(
                    pod, container, "Killing", f"Stopping container {container['name']}"
                )
        self._step(run, grace, "remove")
        if self._replaces_terminating(run):
            # The Job controller counts a terminating pod as failed at once (and may replace it)
            # unless the Job waits for pods to fail with podReplacementPolicy: Failed.
            self._count_for_job(run, succeeded=False)
        self._dirty_job_of(run)
        return pod

    def _replaces_terminating(self, run: PodRun) -> bool:
        job_run = self._jobs.get(run.job_uid or "")
        if job_run is None:
            return False
        job = self.store.get("jobs", job_run.namespace, job_run.name)
        return job is not None and job["spec"].get("podReplacementPolicy") != "Failed"

    def _remove_pod(self, run: PodRun) -> dict[str, Any]:
        """The pod is gone: its last status (killed if it still ran) and then DELETED."""
        if run.node is not None and run.finished_at is None:
            run.token += 1
            run.finished_at = self._moment
            self._release(run)
            run.final_exit_code = 137 if run.started_at else None
            run.final_reason = "Error" if run.started_at else None
            self._refresh(run)
        gone = self.store.remove("pods", run.namespace, run.name)
        assert gone is not None
        self._release(run)
        if run.started_at is not None and any(
            r.startswith("nvidia.com/") and v > 0 for r, v in run.requests.items()
        ):
            self._gone_gpu_runs.append(run)  # Prometheus keeps a deleted pod's series
        self._runs.pop(run.uid, None)
        self._pending.discard(run.uid)
        self._schedule_dirty = True
        job = self._jobs.get(run.job_uid or "")
        if job is not None:
            job.pods.discard(run.uid)
            self._count_for_job(run, succeeded=False)
            self._dirty_jobs.add(job.uid)
            self._finish_foreground_deletion(job)
        return gone

    def _status(self, run: PodRun, pod: dict[str, Any]) -> dict[str, Any]:
        host_ip = self._node_ip(run.node) if run.node else ""
        return pod_status(
            run, pod, moment=self._moment, host_ip=host_ip, image_fails=self.faults.image_fails
        )

    def _node_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", "", node_name) or {}
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        return "10.0.0.1"

    # --- the Job controller --------------------------------------------------------------------

    def _dirty_job_of(self, run: PodRun) -> None:
        if run.job_uid in self._jobs:
            self._dirty_jobs.add(run.job_uid)

    def _count_for_job(self, run: PodRun, *, succeeded: bool) -> None:
        job = self._jobs.get(run.job_uid or "")
        if job is None or run.counted:
            return
        run.counted = True
        if succeeded:
            job.succeeded.add(run.uid)
            if run.index is not None:
                job.succeeded_indexes.add(run.index)
        else:
            job.failed.add(run.uid)
            delay = replacement_delay(len(job.failed))
            job.next_create_at = self._moment + timedelta(seconds=delay / self.speed)
        self._dirty_jobs.add(job.uid)

    def _sync_job(self, run: JobRun) -> None:
        job = self.store.get("jobs", run.namespace, run.name)
        if job is None or run.done or run.foreground_deletion:
            return
        spec = job["spec"]
        if spec.get("suspend"):
            return
        if run.start is None:
            run.start = self._moment
            deadline = spec.get("activeDeadlineSeconds")
            if deadline:
                self._at(run.start + timedelta(seconds=deadline / self.speed), "job", run.uid)
        if run.failure is None:
            run.failure = job_failure(run, spec, self._moment, self.speed)
            if run.failure is not None:
                self._fail_job(job, run)
        unfinished = sum(1 for uid in run.pods if self._runs[uid].finished_at is None)
        if run.failure is not None:
            if not unfinished:
                add_condition(run, "Failed", *run.failure, self._moment)
                run.done = True
        elif job_succeeded(run, spec, unfinished):
            self._complete_job(job, run)
        else:
            self._create_job_pods(job, run)
        status = job_status(run, spec, [self._runs[uid] for uid in run.pods])
        if status != job["status"]:
            self.store.put("jobs", {**job, "status": status})

    def _fail_job(self, job: dict[str, Any], run: JobRun) -> None:
        reason, message = run.failure or ("", "")
        # Since Kubernetes 1.31 a failing Job first gets FailureTarget; Failed follows once its
        # pods are gone (terminating pods still hold their GPUs meanwhile).
        add_condition(run, "FailureTarget", reason, message, self._moment)
        self._event(job, reason, message, type="Warning", component="job-controller")
        for uid in sorted(run.pods):
            pod_run = self._runs[uid]
            if pod_run.finished_at is None and not pod_run.deleting:
                self._event(
                    job,
                    "SuccessfulDelete",
                    f"Deleted pod: {pod_run.name}",
                    component="job-controller",
                )
                self._delete_pod(pod_run, None)

    def _complete_job(self, job: dict[str, Any], run: JobRun) -> None:
        for uid in sorted(run.pods):
            if self._runs[uid].finished_at is None:
                self._delete_pod(self._runs[uid], None)
        run.completion = self._moment
        add_condition(run, "SuccessCriteriaMet", *COMPLETIONS_REACHED, self._moment)
        add_condition(run, "Complete", *COMPLETIONS_REACHED, self._moment)
        run.done = True
        self._event(job, "Completed", "Job completed", component="job-controller")

    def _create_job_pods(self, job: dict[str, Any], run: JobRun) -> None:
        if run.next_create_at is not None and self._moment < run.next_create_at and run.failed:
            self._at(run.next_create_at, "job", run.uid)
            return
        active = [self._runs[uid] for uid in run.pods if self._runs[uid].active]
        indexes = pods_to_create(run, job["spec"], active)
        for index in indexes:
            base = (
                job["metadata"]["name"] if index is None else f"{job['metadata']['name']}-{index}"
            )
            pod = pod_for_job(job, index, f"{base}-{_name_suffix()}", self._moment)
            self._add_pod(pod, job_uid=run.uid, index=index)
            self._event(
                job,
                "SuccessfulCreate",
                f"Created pod: {pod['metadata']['name']}",
                component="job-controller",
            )

    # --- events ------------------------------------------------------------------------------

    def _event(self, involved: dict[str, Any], reason: str, message: str, **options: Any) -> None:
        self.events.record(involved, reason, message, moment=self._moment, **options)

    def _container_event(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        reason: str,
        message: str,
        type: str = "Normal",
    ) -> None:
        self._event(
            pod, reason, message, type=type, field_path=f"spec.containers{{{container['name']}}}"
        )


# --- helpers ---------------------------------------------------------------------------------


def _name_suffix() -> str:
    """Five characters from the alphabet Kubernetes uses for generated names."""
    return "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))


def _same_object(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        return {**obj, "metadata": metadata}

    return strip(a) == strip(b)


def _validate_node(node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    causes = []
    for key, value in (node["metadata"].get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63:
            causes.append(
                (
                    f"metadata.labels[{key}]",
                    f"Invalid value: {value!r}: must be a string of at most 63 characters",
                )
            )
    for key, value in (node["metadata"].get("annotations") or {}).items():
        if not isinstance(value, str):
            causes.append(
                (f"metadata.annotations[{key}]", f"Invalid value: {value!r}: must be a string")
            )
    for number, taint in enumerate(node.get("spec", {}).get("taints") or []):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append((f"spec.taints[{number}].key", "Required value"))
        elif taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(
                (
                    f"spec.taints[{number}].effect",
                    f'Unsupported value: "{taint.get("effect")}": supported values: "NoSchedule", '
                    '"PreferNoSchedule", "NoExecute"',
                )
            )
    if causes:
        raise invalid("Node", name, "", causes)
