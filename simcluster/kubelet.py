"""What the simulated kubelet knows of a pod, and the pod status it derives from that.

:class:`PodRun` is the simulation's record of one pod (where it is bound, when it started and
ended, how its image pull went); :func:`pod_status` turns it into the ``status`` a real kubelet
would report. :func:`run_plan` reads how long a pod runs and how it ends:

* pod annotations ``sim.gpuportal.io/duration-seconds`` (``inf``: until deleted),
  ``sim.gpuportal.io/exit-code`` and ``sim.gpuportal.io/oom-kill: "true"`` (set them on the Job's
  pod template);
* else the first container's environment ``SIM_DURATION_SECONDS``, ``SIM_EXIT_CODE``,
  ``SIM_OOM_KILL``;
* else a ``sleep N`` in the container's command and arguments;
* else the cluster file's ``simulation.default_duration_seconds`` and exit code 0.

A pod's GPU utilization (what the simulated DCGM exporter publishes, see
:mod:`simcluster.prometheus`) follows its profile, read by :func:`utilization_profile` from the
annotation ``sim.gpuportal.io/gpu-utilization``, else the first container's environment
``SIM_GPU_UTILIZATION``, else ``simulation.default_gpu_utilization`` (100): a percentage
(``"35"``) or steps ``"<simulated seconds since start>:<percent>,…"`` (``"0:90,600:5"``: 90 %
for the first ten simulated minutes, then 5 %).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from simcluster.clock import rfc3339
from simcluster.nodes import SimulationSettings

DURATION_ANNOTATION = "sim.gpuportal.io/duration-seconds"
EXIT_CODE_ANNOTATION = "sim.gpuportal.io/exit-code"
OOM_ANNOTATION = "sim.gpuportal.io/oom-kill"
UTILIZATION_ANNOTATION = "sim.gpuportal.io/gpu-utilization"
# (simulated seconds since the container started, percent), in time order from 0.
Profile = tuple[tuple[float, float], ...]
_SLEEP = re.compile(r"(?:^|[\s;&|])sleep\s+(\d+(?:\.\d+)?)")


@dataclass
class PodRun:
    """What the simulated kubelet and scheduler know about one pod beyond its API object."""

    uid: str
    namespace: str
    name: str
    requests: dict[str, int]  # milli-units
    duration: float | None  # simulated seconds; None runs until deleted
    exit_code: int
    oom: bool
    job_uid: str | None
    index: int | None
    created_at: datetime
    priority: int = 0  # spec.priority: the scheduler tries higher ones first
    # The nodes NodeAffinity's pre-filter leaves it (None: any node), and the scheduler's epoch
    # when it last fitted nowhere (None: not tried yet); see SimCluster._worth_trying.
    candidates: frozenset[str] | None = None
    tried_at: int | None = None
    token: int = 0  # bumped whenever a new step is scheduled; stale timers are ignored
    node: str | None = None
    bound_at: datetime | None = None
    unschedulable_since: datetime | None = None
    unschedulable_message: str = ""
    pull_failures: int = 0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    # Why the kubelet cannot build the containers' configuration (a Secret or key they take
    # their environment from is missing): CreateContainerConfigError's message; "" otherwise.
    config_error: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    final_exit_code: int | None = None
    final_reason: str | None = None
    deleting: bool = False
    counted: bool = False  # already counted by its Job as succeeded or failed
    pod_ip: str = ""
    rejection: tuple[str, str] | None = None  # the kubelet's (reason, message) for a refused pod
    utilization: Profile = ((0.0, 100.0),)
    container_ids: dict[str, str] = field(default_factory=dict)
    image_ids: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.finished_at is None

    @property
    def active(self) -> bool:
        """Counted as active by its Job: not finished and not being deleted."""
        return self.finished_at is None and not self.deleting


def run_plan(pod: dict[str, Any], settings: SimulationSettings) -> tuple[float | None, int, bool]:
    """How long the pod runs (simulated seconds; None: until deleted), its exit code and whether
    it ends OOM-killed. See the module docstring for where each comes from."""
    annotations = pod["metadata"].get("annotations") or {}
    container = pod["spec"]["containers"][0]
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
    duration_text = annotations.get(DURATION_ANNOTATION, env.get("SIM_DURATION_SECONDS"))
    duration: float | None
    if duration_text is not None:
        duration = _seconds(duration_text)
    else:
        command = " ".join([*(container.get("command") or []), *(container.get("args") or [])])
        match = _SLEEP.search(command)
        duration = float(match.group(1)) if match else settings.default_duration_seconds
    exit_text = annotations.get(EXIT_CODE_ANNOTATION, env.get("SIM_EXIT_CODE", "0"))
    try:
        exit_code = int(exit_text)
    except (TypeError, ValueError):
        exit_code = 1
    oom_text = annotations.get(OOM_ANNOTATION, env.get("SIM_OOM_KILL", "false"))
    return duration, exit_code, str(oom_text).lower() in ("true", "1", "yes")


def utilization_profile(pod: dict[str, Any], settings: SimulationSettings) -> Profile:
    """The pod's GPU utilization profile (see the module docstring); text that does not parse
    falls back to the default, as an unreadable duration does."""
    annotations = pod["metadata"].get("annotations") or {}
    container = pod["spec"]["containers"][0]
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
    text = annotations.get(UTILIZATION_ANNOTATION, env.get("SIM_GPU_UTILIZATION"))
    default: Profile = ((0.0, min(max(settings.default_gpu_utilization, 0.0), 100.0)),)
    if not text:
        return default
    steps: list[tuple[float, float]] = []
    try:
        for part in str(text).split(","):
            at, _, percent = part.strip().rpartition(":")
            steps.append((float(at) if at else 0.0, float(percent)))
    except ValueError:
        return default
    steps.sort()
    if any(not 0 <= p <= 100 or t < 0 for t, p in steps) or not steps:
        return default
    if steps[0][0] > 0:
        steps.insert(0, (0.0, default[0][1]))
    return tuple(steps)


def utilization_between(profile: Profile, start: float, end: float) -> float:
    """The profile's average over [``start``, ``end``) simulated seconds since the start (its
    value at ``start`` when the span is empty)."""
    if end <= start:
        return next(p for t, p in reversed(profile) if t <= start)
    total = 0.0
    for index, (at, percent) in enumerate(profile):
        until = profile[index + 1][0] if index + 1 < len(profile) else math.inf
        lo, hi = max(at, start), min(until, end)
        if hi > lo:
            total += (hi - lo) * percent
    return total / (end - start)


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isinf(value) or value < 0 else value


def pod_status(
    run: PodRun,
    pod: dict[str, Any],
    *,
    moment: datetime,
    host_ip: str,
    image_fails: Callable[[str], bool],
) -> dict[str, Any]:
    """The pod's ``status``, derived entirely from what the simulation knows of it."""
    qos = pod["status"].get("qosClass", "BestEffort")
    if run.node is None:
        status: dict[str, Any] = {"phase": "Pending", "qosClass": qos}
        if run.unschedulable_message:
            since = run.unschedulable_since or moment
            status["conditions"] = [
                condition(
                    "PodScheduled", "False", since, "Unschedulable", run.unschedulable_message
                )
            ]
        return status
    bound = run.bound_at or moment
    if run.rejection is not None:
        reason, message = run.rejection
        return {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "startTime": rfc3339(bound),
            "qosClass": qos,
        }
    if run.finished_at is not None:
        phase = "Succeeded" if run.final_exit_code == 0 else "Failed"
    elif run.started_at is not None:
        phase = "Running"
    else:
        phase = "Pending"
    containers = pod["spec"]["containers"]
    return {
        "phase": phase,
        "conditions": _pod_conditions(run, phase, bound, [c["name"] for c in containers]),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": run.pod_ip,
        "podIPs": [{"ip": run.pod_ip}],
        "startTime": rfc3339(bound),
        "containerStatuses": [_container_status(run, c, image_fails) for c in containers],
        "qosClass": qos,
    }


def _pod_conditions(
    run: PodRun, phase: str, bound: datetime, containers: list[str]
) -> list[dict[str, Any]]:
    if phase == "Running" and not run.deleting:
        ready = condition("Ready", "True", run.started_at or bound)
        containers_ready = condition("ContainersReady", "True", run.started_at or bound)
    elif phase in ("Succeeded", "Failed"):
        ready = condition("Ready", "False", run.finished_at or bound, "PodCompleted")
        containers_ready = condition(
            "ContainersReady", "False", run.finished_at or bound, "PodCompleted"
        )
    else:
        message = f"containers with unready status: [{' '.join(containers)}]"
        ready = condition("Ready", "False", bound, "ContainersNotReady", message)
        containers_ready = condition(
            "ContainersReady", "False", bound, "ContainersNotReady", message
        )
    sandbox = "False" if phase in ("Succeeded", "Failed") else "True"
    return [
        condition("PodReadyToStartContainers", sandbox, bound),
        condition("Initialized", "True", bound),
        ready,
        containers_ready,
        condition("PodScheduled", "True", bound),
    ]


def _container_status(
    run: PodRun, container: dict[str, Any], image_fails: Callable[[str], bool]
) -> dict[str, Any]:
    name, image = container["name"], container["image"]
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "lastState": {},
    }
    container_id = run.container_ids.get(name)
    if container_id:
        status["containerID"] = container_id
        status["imageID"] = run.image_ids.get(name, "")
    if run.finished_at is not None and run.started_at is not None:
        status["state"] = {
            "terminated": {
                "exitCode": run.final_exit_code,
                "reason": run.final_reason,
                "startedAt": rfc3339(run.started_at),
                "finishedAt": rfc3339(run.finished_at),
                "containerID": container_id or "",
            }
        }
    elif run.started_at is not None:
        status["state"] = {"running": {"startedAt": rfc3339(run.started_at)}}
        status["started"] = True
        status["ready"] = not run.deleting
    elif run.config_error:
        status["state"] = {"waiting": {"reason": CONFIG_ERROR, "message": run.config_error}}
    else:
        failing = run.pull_failures > 0 and image_fails(image)
        waiting = {"reason": run.waiting_reason if failing else "ContainerCreating"}
        if failing and run.waiting_message:
            waiting["message"] = run.waiting_message
        status["state"] = {"waiting": waiting}
    return status


def condition(
    kind: str, status: str, since: datetime, reason: str = "", message: str = ""
) -> dict[str, Any]:
    """A pod condition as the kubelet writes it."""
    result: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(since),
    }
    if reason:
        result["reason"] = reason
    if message:
        result["message"] = message
    return result


def image_reference(image: str) -> str:
    """``busybox`` → ``docker.io/library/busybox:latest``, as containerd names it."""
    name = image
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name = f"{name}:latest"
    return name


def memory_limit(pod: dict[str, Any]) -> str:
    """The first container's memory limit as written (for the OOM event's message)."""
    limits = (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
    return str(limits.get("memory", ""))


def log_waiting_reason(run: PodRun) -> str:
    """Why the ``log`` subresource cannot answer yet, in the kubelet's words."""
    if run.config_error:
        return CONFIG_ERROR
    if run.waiting_reason in ("ErrImagePull", "ImagePullBackOff") and run.pull_failures:
        return "trying and failing to pull image"
    return "ContainerCreating"


# --- a container's environment from Secrets ---------------------------------------------------

CONFIG_ERROR = "CreateContainerConfigError"
# The kubelet's pod worker tries a pod whose container it could not configure again after
# this back-off (pkg/kubelet/pod_workers.go, backOffPeriod), however often it failed.
CONFIG_RETRY_SECONDS = 10.0
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def container_config_error(
    container: dict[str, Any], namespace: str, secret: Callable[[str], dict[str, Any] | None]
) -> str | None:
    """Why the kubelet cannot make ``container``'s environment, in its words, or None:
    ``envFrom`` first, then ``env``, as ``makeEnvironmentVariables`` reads them. A missing
    Secret is ``secret "x" not found``, a missing key ``couldn't find key k in Secret ns/x``;
    both are skipped when the reference is ``optional``. ConfigMaps are not served: any
    reference to one finds none. ``secret`` looks a Secret of ``namespace`` up by name."""
    for source in container.get("envFrom") or []:
        for kind, ref in (
            ("secret", source.get("secretRef")),
            ("configmap", source.get("configMapRef")),
        ):
            if ref is None:
                continue
            found = secret(ref.get("name", "")) if kind == "secret" else None
            if found is None and not ref.get("optional"):
                return f'{kind} "{ref.get("name", "")}" not found'
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        if ref := source.get("configMapKeyRef"):
            if not ref.get("optional"):
                return f'configmap "{ref.get("name", "")}" not found'
            continue
        ref = source.get("secretKeyRef")
        if ref is None:
            continue
        name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
        found = secret(name)
        if found is None:
            if optional:
                continue
            return f'secret "{name}" not found'
        if key not in (found.get("data") or {}) and not optional:
            return f"couldn't find key {key} in Secret {namespace}/{name}"
    return None


def skipped_env_keys(secret: dict[str, Any]) -> list[str]:
    """Keys of a Secret used by ``envFrom`` that are no valid variable names: the kubelet leaves
    them out (with an ``InvalidEnvironmentVariableNames`` event)."""
    return sorted(k for k in secret.get("data") or {} if not _ENV_VAR_NAME.fullmatch(k))
