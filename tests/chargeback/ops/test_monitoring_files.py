"""The Grafana dashboard and the alert rules shipped in docker/ query only series /metrics
exports (a renamed series would leave a panel or an alert silently empty)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from chargeback.ops.metrics import PortalCollector

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
SERIES = re.compile(r"\bgpuportal_[a-z0-9_]+")


def exported() -> set[str]:
    names = set()
    for family in PortalCollector(timezone.now()).collect():
        names.add(family.name)
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def test_the_alert_rules_use_exported_series():
    rules = yaml.safe_load((ROOT / "docker/prometheus/gpu-portal-alerts.yaml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}

    assert {
        "GpuPortalReconcileStalled",
        "GpuPortalClusterUnreachable",
        "GpuPortalQueueFarPastWaitTarget",
    } <= set(alerts)
    used = {name for r in alerts.values() for name in SERIES.findall(r["expr"])}
    assert used and used <= exported()


def test_the_grafana_dashboard_uses_exported_series():
    dashboard = json.loads((ROOT / "docker/grafana/gpu-portal.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]

    used = {name for e in exprs for name in SERIES.findall(e)}
    assert used and used <= exported()
