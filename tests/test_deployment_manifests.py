"""The Kubernetes manifests in docker/k8s validate strictly, and RBAC grants only what the
adapter uses."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT

MANIFESTS = sorted((ROOT / "docker" / "k8s").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_strictly(path):
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, "1.31", strict=True)


def test_the_portal_may_not_touch_anything_it_does_not_need():
    role = next(
        d
        for d in yaml.safe_load_all((ROOT / "docker/k8s/rbac.yaml").read_text())
        if d["kind"] == "ClusterRole"
    )
    grants = {
        (g, r): sorted(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }

    assert grants == {
        ("", "nodes"): ["get", "list", "patch", "watch"],  # patch: drains, scale-down asks
        ("", "pods"): ["delete", "get", "list", "watch"],
        ("", "pods/log"): ["get"],
        ("", "events"): ["list"],
        ("", "namespaces"): ["create", "get"],
        ("batch", "jobs"): ["create", "delete", "get", "list", "watch"],
        # asking node pools for nodes (docs/cluster.md, "Node pools")
        ("autoscaling.x-k8s.io", "provisioningrequests"): ["create", "get", "list"],
    }
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])


def documents() -> list[dict]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text())]


def pod_specs() -> dict[str, dict]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in documents()
        if d["kind"] in ("Deployment", "Job")
    }


def test_only_the_portals_service_account_gets_the_role_and_no_other_rbac_exists():
    rbac = [d for d in documents() if d["apiVersion"].startswith("rbac.authorization.k8s.io/")]

    assert sorted((d["kind"], d["metadata"]["name"]) for d in rbac) == [
        ("ClusterRole", "gpu-portal"),
        ("ClusterRoleBinding", "gpu-portal"),
    ]
    binding = next(d for d in rbac if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-portal",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-portal", "namespace": "gpu-portal"}
    ]


def test_web_and_worker_run_as_the_portal_and_the_migration_gets_no_cluster_access():
    specs = pod_specs()

    assert set(specs) == {"gpu-portal-web", "gpu-portal-worker", "gpu-portal-migrate"}
    assert specs["gpu-portal-web"]["serviceAccountName"] == "gpu-portal"
    assert specs["gpu-portal-worker"]["serviceAccountName"] == "gpu-portal"
    assert "serviceAccountName" not in specs["gpu-portal-migrate"]
    assert specs["gpu-portal-migrate"]["automountServiceAccountToken"] is False


def test_every_container_is_non_root_read_only_and_has_somewhere_to_write():
    for name, spec in pod_specs().items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            # A read-only root: temporary files and the beat schedule go to emptyDir volumes.
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/var/lib/gpu-portal"} <= mounts, name


def test_exactly_one_beat_runs():
    worker = next(d for d in documents() if d["metadata"]["name"] == "gpu-portal-worker")
    beats = [
        d["metadata"]["name"]
        for d in documents()
        if d["kind"] in ("Deployment", "Job")
        and any("--beat" in c.get("args", []) for c in d["spec"]["template"]["spec"]["containers"])
    ]

    assert beats == ["gpu-portal-worker"]
    assert (worker["spec"]["replicas"], worker["spec"]["strategy"]) == (1, {"type": "Recreate"})
