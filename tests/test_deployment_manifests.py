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
        ("", "nodes"): ["get", "list", "patch", "watch"],  # patch: drains
        ("", "pods"): ["delete", "get", "list", "watch"],
        ("", "pods/log"): ["get"],
        ("", "events"): ["list"],
        ("", "namespaces"): ["create", "get"],
        ("batch", "jobs"): ["create", "delete", "get", "list", "watch"],
    }
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
