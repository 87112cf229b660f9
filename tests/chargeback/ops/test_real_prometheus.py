"""A real Prometheus (Debian's ``prometheus`` package, installed by ``make test`` and
``.ci/run``) started here on a free port with a configuration of its own: it scrapes the
portal's /metrics (the live server, with its bearer token) and the simulated cluster's DCGM
exporter with ``honor_labels: true`` (docs/operations.md), loads the shipped alert rules, and
answers the shipped dashboard's and rules' expressions; the portal's duty cycle reads it back."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import warnings
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from queues.cluster.adapter import Cluster
from queues.cluster.prometheus import Prometheus
from queues.jobs.duty import duty_lines
from queues.reconcile.cycle import reconcile_cycle
from tests.chargeback.ops.test_duty import submit

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "docker/prometheus/gpu-portal-alerts.yaml"
DASHBOARD = ROOT / "docker/grafana/gpu-portal.json"
TOKEN = "metrics-token-for-the-real-prometheus"


def binary(name: str) -> str:
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
    )
    if found is None:
        message = (
            f"!!! {name} IS NOT INSTALLED: the real-Prometheus test did not run. "
            "`make test` and .ci/run install Debian's prometheus package; run `make prometheus`."
        )
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, path: str, **params: str) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def query(base: str, expr: str) -> list[dict]:
    return api(base, "/api/v1/query", query=expr)["result"]


def wait_for(what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


@pytest.fixture
def prometheus(tmp_path, live_server, sim_cluster, settings):
    """Prometheus scraping the portal (and a dead second portal target, so that the target-down
    rule has something to find) and the simulated DCGM exporter every second."""
    settings.METRICS_TOKEN = TOKEN
    token = tmp_path / "token"
    token.write_text(TOKEN)
    portal = urllib.parse.urlsplit(live_server.url).netloc
    dcgm = urllib.parse.urlsplit(sim_cluster.url)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "gpu-portal",
                # /metrics computes from the database: give it time on a loaded machine (a
                # scrape slower than its timeout would read as the portal being down)
                "scrape_interval": "3s",
                "scrape_timeout": "3s",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": str(token)},
                "static_configs": [{"targets": [portal]}],
            },
            {
                "job_name": "gpu-portal-gone",
                "static_configs": [{"targets": [f"127.0.0.1:{free_port()}"]}],
            },
            {
                "job_name": "dcgm-exporter",
                "honor_labels": True,
                "scheme": dcgm.scheme,
                "tls_config": {"insecure_skip_verify": True},
                "metrics_path": "/dcgm/metrics",
                # As Kubernetes service discovery labels the exporter's own pod: without
                # honor_labels these would rename the series' namespace and pod to exported_*.
                "static_configs": [
                    {
                        "targets": [dcgm.netloc],
                        "labels": {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p"},
                    }
                ],
            },
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        [binary("promtool"), "check", "config", str(config_file)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    process = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("Prometheus to be ready", lambda: _ready(base))
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_promtool_accepts_the_shipped_rules():
    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_prometheus_scrapes_the_portal_and_dcgm_and_every_shipped_query_answers(
    prometheus, sim_cluster, cluster, mia
):
    # A vision job on 2 GPUs at 25 % while Prometheus scrapes, and one of 16 GPUs in a pod
    # that waits (no node has 16).
    job = submit(mia, utilization="25", seconds=600, gpus=2)
    waiting = submit(mia, utilization="25", seconds=600, gpus=16)
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(5)
    job.refresh_from_db()
    waiting.refresh_from_db()
    assert (job.state, waiting.state) == ("running", "pending")

    def targets():
        active = api(prometheus, "/api/v1/targets")["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in active}
        # every target scraped once ("unknown" until then: scrapes are spread over the
        # interval, so the gone target may come after the other two)
        if "unknown" in health.values():
            return None
        return health if health.get("gpu-portal") == health.get("dcgm-exporter") == "up" else None

    health = wait_for("the portal and DCGM targets up, every target scraped", targets)
    assert health["gpu-portal-gone"] == "down"

    namespace = job.team.namespace
    # honor_labels kept the exporter's namespace and pod (not the scrape target's)
    series = wait_for(
        "three DCGM samples of the job's pod",
        lambda: [
            s
            for s in query(
                prometheus, f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}[1m])'
            )
            if float(s["value"][1]) >= 3
        ],
    )
    assert series[0]["metric"]["pod"].startswith(job.k8s_job_name)

    # Every shipped dashboard expression answers with data ($gpu_class: all).
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    wait_for(
        "two portal scrapes (rate() needs two samples)",
        lambda: (
            len(query(prometheus, "gpuportal_cluster_reachable[20s]") or [{}])
            and len(query(prometheus, "gpuportal_cluster_reachable[20s]")[0]["values"]) >= 2
        ),
    )
    empty = [e for e in exprs if not query(prometheus, e.replace("$gpu_class", ".*"))]
    assert empty == []

    # Every rule is loaded and evaluates without error; each series a rule reads exists.
    def evaluated():
        groups = api(prometheus, "/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return (
            rules
            if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules)
            else None
        )

    rules = wait_for("every rule evaluated", evaluated)
    assert {r["name"] for r in rules} >= {"GpuPortalTargetDown", "GpuPortalTargetMissing"}
    assert [
        (r["name"], r["health"], r.get("lastError", "")) for r in rules if r["health"] != "ok"
    ] == []
    for rule in rules:
        for name in set(re.findall(r"\b(?:gpuportal_[a-z0-9_]+|DCGM_[A-Z_]+|up)\b", rule["query"])):
            assert query(prometheus, f"count({name})"), f"{rule['name']}: no series {name}"
    # the dead portal target is found by the target-down rule, and nothing is absent
    down = query(prometheus, 'up{job=~"gpu-portal.*"} == 0')
    assert "gpu-portal-gone" in [s["metric"]["job"] for s in down]
    assert query(prometheus, 'absent(up{job=~"gpu-portal.*"})') == []
    alerts = wait_for(
        "the target-down alert pending",
        lambda: [
            a
            for a in api(prometheus, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == "GpuPortalTargetDown"
        ],
    )
    assert alerts[0]["labels"]["job"] == "gpu-portal-gone"

    # The portal's duty cycle, read from this Prometheus: 2 GPUs × 600 s at 25 %.
    start = job.started_at - timedelta(minutes=1)
    sim_cluster.advance(600)
    for _ in range(2):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(5)
    job.refresh_from_db()
    assert job.state == "succeeded"
    [line] = duty_lines(
        Prometheus(prometheus), start=start, end=sim_cluster.now(), job_ids=[job.pk]
    )
    assert line.gpu_hours == Decimal("0.333")
    assert (line.busy_gpu_hours, line.idle_gpu_hours) == (Decimal("0.083"), Decimal("0.250"))
