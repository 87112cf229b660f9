"""The deployment passes its own checks: with the production settings an operator sets
(``DEBUG`` off, ``ALLOWED_HOSTS`` the public name only, HTTPS redirect on, behind a TLS proxy),
gunicorn answers exactly the requests that the kubelet sends for the probes in
``docker/k8s/portal.yaml`` and that Prometheus sends for the scrape jobs in
``docker/prometheus/gpu-portal-scrape.yaml``: same method, path, scheme, ``Host`` and headers.

The requests go to 127.0.0.1; the pod IP and the Service name only appear in the ``Host``
header, as they do when the kubelet or Prometheus connect to the pod."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.faults.processes import free_port, this_database_url, wait_until, web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

POD_IP = "10.42.3.17"  # an address the kubelet would use: only ever a Host header here
METRICS_TOKEN = "scrape-token-for-the-test"
PUBLIC_NAME = "gpus.example.org"
KUBELET_VERSION = "1.31"
# What Prometheus 3 sends (its default scrape protocols, in its order of preference).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def manifests() -> list[dict]:
    path = ROOT / "docker" / "k8s" / "portal.yaml"
    return list(yaml.safe_load_all(path.read_text()))


def kubelet_probes() -> list[tuple[str, str, dict]]:
    """(container, probe kind, httpGet) for every HTTP probe of every container."""
    found = []
    for document in manifests():
        if document["kind"] != "Deployment":
            continue
        for container in document["spec"]["template"]["spec"]["containers"]:
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = container.get(kind)
                if probe and "httpGet" in probe:
                    found.append((container["name"], kind, probe["httpGet"]))
    return found


def scrape_jobs() -> list[dict]:
    path = ROOT / "docker" / "prometheus" / "gpu-portal-scrape.yaml"
    return yaml.safe_load(path.read_text())["scrape_configs"]


@pytest.fixture(scope="module")
def production_env() -> dict[str, str]:
    """The settings docs/operations.md tells an operator to set (plus this test's token)."""
    return {
        "DEBUG": "false",
        "ALLOWED_HOSTS": PUBLIC_NAME,
        "SECURE_SSL_REDIRECT": "true",
        "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        "METRICS_TOKEN": METRICS_TOKEN,
    }


@pytest.fixture
def portal(tmp_path, production_env):
    port = free_port()
    server = web(tmp_path, port, DATABASE_URL=this_database_url(), **production_env).start()

    def up():
        try:
            return send(port, "GET", "/healthz", {"Host": PUBLIC_NAME}).status == 200
        except OSError:
            return False

    try:
        wait_until(up, seconds=60, what=f"gunicorn answering\n{server.output()[-2000:]}")
        yield port
    finally:
        server.stop()


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = response.headers
        self.body = response.read()


def send(port: int, method: str, path: str, headers: dict[str, str]) -> Answer:
    """One request with exactly these headers (http.client adds no Host of its own here)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        return Answer(connection.getresponse())
    finally:
        connection.close()


def test_the_manifests_probe_the_web_pods_over_http():
    probes = kubelet_probes()

    assert {(container, kind) for container, kind, _ in probes} == {
        ("web", "readinessProbe"),
        ("web", "livenessProbe"),
    }
    for _, _, http_get in probes:
        assert http_get.get("scheme", "HTTP") == "HTTP"


def test_every_kubelet_probe_is_answered_200_with_the_pod_ip_as_host(portal):
    for container, kind, http_get in kubelet_probes():
        # What the kubelet's HTTP prober sends: Host is the pod IP and the probe's port.
        headers = {
            "Host": f"{http_get.get('host', POD_IP)}:{http_get['port']}",
            "User-Agent": f"kube-probe/{KUBELET_VERSION}",
            "Accept": "*/*",
            "Connection": "close",
            **{h["name"]: h["value"] for h in http_get.get("httpHeaders", [])},
        }
        answer = send(portal, "GET", http_get["path"], headers)

        assert answer.status == 200, (container, kind, answer.status, answer.body[:300])
        assert json.loads(answer.body) == {"status": "ok", "database": "ok"}


def test_every_documented_scrape_is_answered_with_the_metrics(portal):
    for job in scrape_jobs():
        assert job["scheme"] == "http"
        assert job["authorization"].get("type", "Bearer") == "Bearer"
        for target in (t for group in job["static_configs"] for t in group["targets"]):
            headers = {
                "Host": target,
                "User-Agent": "Prometheus/3.5.0",
                "Accept": PROMETHEUS_ACCEPT,
                "Accept-Encoding": "gzip",
                "X-Prometheus-Scrape-Timeout-Seconds": "10",
            }
            path = job["metrics_path"]

            scraped = send(
                portal, "GET", path, {**headers, "Authorization": f"Bearer {METRICS_TOKEN}"}
            )
            anonymous = send(portal, "GET", path, headers)
            wrong = send(portal, "GET", path, {**headers, "Authorization": "Bearer not-the-token"})

            assert scraped.status == 200, (job["job_name"], target, scraped.body[:300])
            assert scraped.headers["Content-Type"].startswith("text/plain; version=")
            assert b"# TYPE gpuportal_cluster_reachable gauge" in scraped.body
            assert (anonymous.status, wrong.status) == (401, 401)
            assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'


def test_people_still_get_the_host_check_and_the_https_redirect(portal):
    # Any other path through the pod's IP is refused: ALLOWED_HOSTS still guards the portal.
    assert send(portal, "GET", "/login/", {"Host": f"{POD_IP}:8000"}).status == 400
    # Through the public name over plain HTTP: redirected to HTTPS.
    plain = send(portal, "GET", "/login/", {"Host": PUBLIC_NAME})
    assert (plain.status, plain.headers["Location"]) == (301, f"https://{PUBLIC_NAME}/login/")
    # Through the proxy, HTTPS: the page, with HSTS.
    tls = send(portal, "GET", "/login/", {"Host": PUBLIC_NAME, "X-Forwarded-Proto": "https"})
    assert tls.status == 200
    assert tls.headers["Strict-Transport-Security"].startswith("max-age=31536000")


def test_the_probe_paths_take_no_writes(portal):
    # A POST to a probe path is not a probe: 405, whatever the Host.
    answer = send(portal, "POST", "/healthz", {"Host": f"{POD_IP}:8000", "Content-Length": "0"})
    assert answer.status == 405


def test_the_scrape_file_is_what_the_docs_show():
    docs = (ROOT / "docs" / "operations-dashboard.md").read_text()
    assert "docker/prometheus/gpu-portal-scrape.yaml" in docs
    assert Path(ROOT / "docker" / "prometheus" / "gpu-portal-scrape.yaml").is_file()
