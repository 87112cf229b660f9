"""Job and pod manifests for the simulated cluster's tests (plain dicts, as the client accepts)."""

from __future__ import annotations

from typing import Any

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
L4 = "NVIDIA-L4"
T4_SHARED = "Tesla-T4-SHARED"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_job(
    name: str,
    *,
    gpus: int = 1,
    resource: str = "nvidia.com/gpu",
    product: str | None = H100,
    duration: float | None = 60,
    exit_code: int | None = None,
    pods: int = 1,
    indexed: bool = False,
    backoff_limit: int = 0,
    deadline: int | None = None,
    grace: int | None = None,
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
    labels: dict[str, str] | None = None,
    node_names: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
) -> dict[str, Any]:
    """A Job shaped like the portal's: GPUs as limits, GPU toleration, restartPolicy Never."""
    pod_annotations = dict(annotations or {})
    if duration is not None:
        pod_annotations["sim.gpuportal.io/duration-seconds"] = str(duration)
    if exit_code is not None:
        pod_annotations["sim.gpuportal.io/exit-code"] = str(exit_code)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "main",
                "image": image,
                "command": ["python", "train.py"],
                "resources": {"limits": {resource: str(gpus), "cpu": cpu, "memory": memory}},
            }
        ],
    }
    if product:
        pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    if node_names:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": node_names}
                            ]
                        }
                    ]
                }
            }
        }
    if grace is not None:
        pod_spec["terminationGracePeriodSeconds"] = grace
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "parallelism": pods,
        "completions": pods,
        "template": {
            "metadata": {
                "labels": {"gpuportal.io/job": name, **(labels or {})},
                "annotations": pod_annotations,
            },
            "spec": pod_spec,
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"gpuportal.io/job": name, **(labels or {})}},
        "spec": spec,
    }
