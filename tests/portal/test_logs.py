"""Log lines are JSON objects, one a line, carrying the request's id; the reconcile's name the
job and the cluster object they concern."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime

import pytest
from django.test import Client

from portal.logs import REQUEST_ID, PortalJsonFormatter, RequestIdFilter
from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, JobState, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory
from tests.portal.test_settings import load_settings


class LogLines:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def all(self) -> list[dict]:
        # Every line must be one JSON object: json.loads raises on anything else.
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def of(self, logger: str) -> list[dict]:
        return [line for line in self.all() if line["logger"] == logger]


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    """The root logger's records, formatted exactly as the settings' JSON handler does."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PortalJsonFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield LogLines(stream)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.mark.django_db
def test_each_request_writes_one_json_line_with_the_callers_request_id(log_lines):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a.2")

    assert response.status_code == 200
    assert response["X-Request-ID"] == "lb-7f3a.2"
    (line,) = log_lines.of("portal.request")
    assert {k: line[k] for k in ("level", "message", "request_id", "method", "path", "status")} == {
        "level": "INFO",
        "message": "GET /healthz 200",
        "request_id": "lb-7f3a.2",
        "method": "GET",
        "path": "/healthz",
        "status": 200,
    }
    assert line["user"] == ""
    assert isinstance(line["duration_ms"], float)
    assert datetime.fromisoformat(line["time"]).utcoffset() is not None


@pytest.mark.django_db
def test_djangos_own_line_about_a_4xx_carries_the_request_id(log_lines):
    response = Client().get("/no-such-page/", HTTP_X_REQUEST_ID="lb-404")

    assert response.status_code == 404
    (line,) = log_lines.of("django.request")
    assert line["level"] == "WARNING"
    assert line["message"] == "Not Found: /no-such-page/"
    assert line["request_id"] == "lb-404"


@pytest.mark.django_db
@pytest.mark.parametrize("incoming", [None, "", "two words", "a\nb", "x" * 129, '{"forged": 1}'])
def test_without_a_well_formed_request_id_a_new_one_is_made(log_lines, incoming):
    headers = {} if incoming is None else {"HTTP_X_REQUEST_ID": incoming}

    response = Client().get("/healthz", **headers)

    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])
    assert log_lines.of("portal.request")[0]["request_id"] == response["X-Request-ID"]


@pytest.mark.django_db
def test_a_signed_in_users_request_names_them_and_every_line_of_the_request_shares_its_id(
    log_lines, mia
):
    client = Client()
    client.force_login(mia)

    response = client.get("/queues/", HTTP_X_REQUEST_ID="req-1")

    assert response.status_code == 200
    lines = log_lines.all()
    assert lines and {line["request_id"] for line in lines} == {"req-1"}
    assert log_lines.of("portal.request")[0]["user"] == "mia"


@pytest.mark.django_db
def test_the_reconcile_logs_each_change_with_its_job_and_cluster_object(
    log_lines, sim_cluster, mia
):
    job = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        env={"SIM_DURATION_SECONDS": "600"},
    )
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    token = REQUEST_ID.set("task-42")
    try:
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(30)
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    finally:
        REQUEST_ID.reset(token)
        cluster.close()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    namespace, name = job.team.namespace, f"gpuportal-job-{job.pk}"
    pod = sim_cluster.core().list_namespaced_pod(namespace).items[0].metadata.name
    about_job = [
        {k: v for k, v in line.items() if k not in ("time", "message")}
        for line in log_lines.all()
        if line.get("job_id") == job.pk
    ]
    assert about_job == [
        {
            "level": "INFO",
            "logger": "queues.reconcile.jobs",
            "request_id": "task-42",
            "job_id": job.pk,
            "from_state": "pending",
            "to_state": "admitted",
            "event": "admitted",
        },
        {
            "level": "INFO",
            "logger": "queues.reconcile.plan",
            "request_id": "task-42",
            "job_id": job.pk,
            "cluster_object": f"jobs.batch/{namespace}/{name}",
        },
        {
            "level": "INFO",
            "logger": "queues.reconcile.jobs",
            "request_id": "task-42",
            "job_id": job.pk,
            "from_state": "admitted",
            "to_state": "running",
            "event": "started",
        },
        {
            "level": "INFO",
            "logger": "queues.reconcile.usage",
            "request_id": "task-42",
            "job_id": job.pk,
            "cluster_object": f"pods/{namespace}/{pod}",
            "pod_uid": job.usage.get().pod_uid,
        },
    ]


def test_an_unknown_log_format_is_refused(tmp_path):
    result = load_settings(DEBUG="true", PORTAL_VAR_DIR=str(tmp_path), LOG_FORMAT="xml")

    assert result.returncode != 0
    assert "LOG_FORMAT='xml': expected one of json, text" in result.stderr
