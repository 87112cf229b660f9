"""The Jobs the portal creates validate against Kubernetes' schema, offline and strictly."""

from __future__ import annotations

from datetime import timedelta

import kubernetes_validate
import pytest

from queues.cluster.manifests import LaunchSpec, check_quantity, job_manifest
from queues.cluster.secrets import SecretKeyRef

K8S_VERSION = "1.31"


def launch(**overrides) -> LaunchSpec:
    fields = dict(
        job_id=812,
        namespace="team-vision",
        team="vision",
        queue="training",
        image="registry.example/train:1.4",
        command=["python", "train.py"],
        args=["--epochs", "3"],
        env={"WANDB_MODE": "offline"},
        nodes=["h100-1", "h100-1", "h100-2", "h100-2"],
        devices_per_pod=4,
        runtime_limit=timedelta(hours=24),
        grace_period=timedelta(minutes=10),
        job_token="tok-812",
    )
    fields.update(overrides)
    return LaunchSpec(**fields)


def valid(manifest: dict) -> dict:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    return manifest


def test_a_gang_job_is_an_indexed_job_pinned_to_the_planned_nodes():
    manifest = valid(job_manifest(launch()))

    spec = manifest["spec"]
    pod = spec["template"]["spec"]
    assert manifest["metadata"] == {
        "name": "gpuportal-job-812",
        "namespace": "team-vision",
        "labels": {
            "gpuportal.io/job-id": "812",
            "gpuportal.io/team": "vision",
            "gpuportal.io/queue": "training",
            "app.kubernetes.io/managed-by": "gpu-portal",
        },
    }
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (4, 4, "Indexed")
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 24 * 3600 + 600
    assert pod["restartPolicy"] == "Never"
    assert pod["terminationGracePeriodSeconds"] == 600
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {
                "matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["h100-1", "h100-2"]}
                ]
            }
        ]
    }
    assert pod["topologySpreadConstraints"][0]["maxSkew"] == 1
    container = pod["containers"][0]
    assert container["command"] == ["python", "train.py"]
    assert container["args"] == ["--epochs", "3"]
    assert container["resources"]["limits"] == {
        "nvidia.com/gpu": "4",
        "cpu": "1000m",
        "memory": "4096Mi",
    }
    assert {"name": "GPUPORTAL_JOB_TOKEN", "value": "tok-812"} in container["env"]
    assert {
        "name": "GPUPORTAL_CHECKPOINT_DIR",
        "value": "/checkpoints/gpuportal-job-812",
    } in container["env"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_mig_job_asks_for_its_slice_resource():
    manifest = valid(
        job_manifest(launch(nodes=["a100-mig"], devices_per_pod=1, mig_profile="3g.40gb"))
    )

    limits = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/gpu" not in limits
    assert "topologySpreadConstraints" not in manifest["spec"]["template"]["spec"]


def test_an_uneven_gang_allows_the_planned_skew():
    manifest = valid(job_manifest(launch(nodes=["a", "a", "a", "b"], devices_per_pod=2)))

    assert manifest["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["maxSkew"] == 2


def test_the_schema_check_is_strict():
    manifest = job_manifest(launch())
    manifest["spec"]["template"]["spec"]["containers"][0]["gpus"] = 4

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_quantities_are_checked_by_the_portal():
    assert check_quantity("1500m") == "1500m"
    assert check_quantity("64Gi") == "64Gi"
    with pytest.raises(ValueError, match="'four' is not a Kubernetes quantity"):
        check_quantity("four")
    with pytest.raises(ValueError):
        job_manifest(launch(devices_per_pod=-1))


def test_a_secret_reference_becomes_a_secret_key_ref_and_whole_secrets_env_from():
    manifest = valid(
        job_manifest(
            launch(
                env={"WANDB_API_KEY": SecretKeyRef("wandb", "api-key"), "WANDB_MODE": "offline"},
                env_from=["hf-token", "wandb"],
            )
        )
    )

    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [
        {"secretRef": {"name": "hf-token"}},
        {"secretRef": {"name": "wandb"}},
    ]
    assert [e for e in container["env"] if not e["name"].startswith("GPUPORTAL_")] == [
        {
            "name": "WANDB_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
        },
        {"name": "WANDB_MODE", "value": "offline"},
    ]


def test_a_job_without_whole_secrets_has_no_env_from():
    container = valid(job_manifest(launch()))["spec"]["template"]["spec"]["containers"][0]

    assert "envFrom" not in container
