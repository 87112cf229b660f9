"""The Kubernetes Job the portal creates for an admitted job (pure: a dict for the API).

One ``batch/v1`` Job per portal job, in the team's namespace, named from the job id so that a
retried create finds its own Job (``AlreadyExists`` is success). Pods are pinned to the nodes
the admission engine chose; a gang is an Indexed Job whose pods all start together or not at all
(the reconcile rolls back a partial start).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from queues.cluster.nodes import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from queues.cluster.pods import JOB_ID_LABEL, QUEUE_LABEL, TEAM_LABEL
from queues.cluster.secrets import EnvValue, env_entries, env_from_entries

MANAGED_BY = "gpu-portal"
# Time a pod may take to be scheduled, pull its image and start before its runtime limit counts;
# activeDeadlineSeconds covers the Job's whole life, including that start-up.
STARTUP_ALLOWANCE = timedelta(minutes=10)
DEFAULT_GRACE = timedelta(seconds=30)
FINISHED_JOB_TTL = timedelta(hours=1)
CHECKPOINT_ROOT = "/checkpoints"
RUN_AS_USER = 1000

# Kubernetes' long-standing rule for environment variable names (every version accepts it).
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
# The variables the portal sets itself in every pod; a job may not set its own.
RESERVED_ENV_PREFIX = "GPUPORTAL_"
# Kubernetes' quantity syntax: a decimal number with an optional binary or decimal suffix.
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")


def job_name(job_id: int) -> str:
    return f"gpuportal-job-{job_id}"


def check_quantity(value: str) -> str:
    """``value`` if it is a valid Kubernetes quantity, else ValueError (the schema validator
    does not check quantity syntax, so the portal does)."""
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return value


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the Job needs, decided before it is built."""

    job_id: int
    namespace: str
    team: str
    queue: str
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, EnvValue]  # text, or a key of a Secret in the namespace
    nodes: list[str]  # node of each pod, in index order
    devices_per_pod: int
    mig_profile: str = ""
    cpu_millicores: int = 1000
    memory_mib: int = 4096
    runtime_limit: timedelta = timedelta(hours=1)
    grace_period: timedelta = DEFAULT_GRACE
    job_token: str = ""
    api_url: str = ""
    extra_pod_annotations: dict[str, str] = field(default_factory=dict)
    env_from: list[str] = field(default_factory=list)  # Secrets whose every key is a variable


def job_manifest(spec: LaunchSpec) -> dict[str, Any]:
    """The ``batch/v1`` Job for ``spec``; every quantity is checked."""
    name = job_name(spec.job_id)
    labels = {
        JOB_ID_LABEL: str(spec.job_id),
        TEAM_LABEL: spec.team,
        QUEUE_LABEL: spec.queue,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }
    pods = len(spec.nodes)
    resource = f"{MIG_RESOURCE_PREFIX}{spec.mig_profile}" if spec.mig_profile else GPU_RESOURCE
    limits = {
        resource: check_quantity(str(spec.devices_per_pod)),
        "cpu": check_quantity(f"{spec.cpu_millicores}m"),
        "memory": check_quantity(f"{spec.memory_mib}Mi"),
    }
    env: dict[str, EnvValue] = {
        **spec.env,
        "GPUPORTAL_JOB_ID": str(spec.job_id),
        "GPUPORTAL_CHECKPOINT_DIR": f"{CHECKPOINT_ROOT}/{name}",
    }
    if spec.job_token:
        # Scoped to this job alone: it can only report this job's checkpoints.
        env["GPUPORTAL_JOB_TOKEN"] = spec.job_token
    if spec.api_url:
        env["GPUPORTAL_API_URL"] = spec.api_url
    per_node = Counter(spec.nodes)
    skew = max(1, max(per_node.values()) - min(per_node.values())) if per_node else 1
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(spec.grace_period.total_seconds()),
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": sorted(per_node),
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
        ],
        "containers": [
            {
                "name": "main",
                "image": spec.image,
                **({"command": list(spec.command)} if spec.command else {}),
                **({"args": list(spec.args)} if spec.args else {}),
                **({"envFrom": env_from_entries(spec.env_from)} if spec.env_from else {}),
                "env": env_entries(env),
                "resources": {"limits": limits, "requests": dict(limits)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if pods > 1:
        # The engine placed the gang: keep the scheduler to that spread across its nodes.
        pod_spec["topologySpreadConstraints"] = [
            {
                "maxSkew": skew,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {JOB_ID_LABEL: str(spec.job_id)}},
            }
        ]
    deadline = spec.runtime_limit + STARTUP_ALLOWANCE
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(deadline.total_seconds()),
            # The cluster removes a finished Job (and its pods' logs) an hour after it ended;
            # the portal has recorded its outcome and usage by then.
            "ttlSecondsAfterFinished": int(FINISHED_JOB_TTL.total_seconds()),
            "template": {
                "metadata": {
                    "labels": labels,
                    **(
                        {"annotations": dict(spec.extra_pod_annotations)}
                        if spec.extra_pod_annotations
                        else {}
                    ),
                },
                "spec": pod_spec,
            },
        },
    }
