"""PostgreSQL restarted under load: while it is down every request is answered 503 (JSON under
/api/, with Retry-After), never 500; nothing half-written remains; the portal serves again by
itself once the database is back, without a restart.

The database is a private PostgreSQL cluster the test makes with initdb in a temporary
directory and stops and starts with pg_ctl; the portal runs under gunicorn as in the image.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import psycopg
import pytest

from tests.conftest import ROOT
from tests.faults.http import call
from tests.faults.processes import (
    PG_BIN,
    PrivatePostgres,
    free_port,
    portal_env,
    wait_until,
    web,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PG_BIN, reason="no PostgreSQL server binaries (pg_ctl) installed"),
]

BODY = {
    "team": "vision",
    "queue": "batch",
    "capability_class": "any-gpu",
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
}


@dataclass
class Call:
    started: float
    ended: float
    path: str
    status: int
    content_type: str
    body: bytes
    retry_after: str | None


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_requests_get_503_while_postgresql_restarts_and_nothing_is_half_written(tmp_path):
    pg = PrivatePostgres()
    pg.init().start()
    server = None
    try:
        pg.createdb("portal")
        env = portal_env(tmp_path, DATABASE_URL=pg.url(), RECONCILE_ON_COMMIT="false")
        manage(env, "migrate", "--noinput")
        manage(env, "apply_policy", "examples/policy.yaml")
        token = manage(
            env,
            "shell",
            "-c",
            "from django.contrib.auth.models import User; from portal.models import ApiToken; "
            "print(ApiToken.issue(user=User.objects.get(username='mia'), name='load')[1])",
        ).splitlines()[-1]
        port = free_port()
        server = web(tmp_path, port, **env).start()
        portal = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(portal), seconds=60, what="the web server answers")

        calls: list[Call] = []
        stop = threading.Event()

        def load(path: str, body: dict | None) -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    answer = call(f"{portal}{path}", token=token, body=body, timeout=30)
                except OSError:
                    continue  # a connection refused or reset is the client's side: not counted
                calls.append(
                    Call(
                        started,
                        time.monotonic(),
                        path,
                        answer.status,
                        answer.content_type,
                        answer.body,
                        answer.headers.get("Retry-After"),
                    )
                )

        threads = [
            threading.Thread(target=load, args=("/api/jobs/", BODY)),
            threading.Thread(target=load, args=("/api/jobs/?page_size=5", None)),
            threading.Thread(target=load, args=("/healthz", None)),
        ]
        for thread in threads:
            thread.start()
        try:
            time.sleep(3)
            stopping = time.monotonic()
            pg.stop()
            down_from = time.monotonic()
            time.sleep(4)
            down_until = time.monotonic()
            pg.start()
            up_at = time.monotonic()
            wait_until(
                lambda: any(c.started > up_at and c.status == 201 for c in calls),
                seconds=60,
                what="a submission accepted again after the restart",
            )
            time.sleep(2)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
    finally:
        if server is not None:
            server.stop()

    try:
        assert not [c for c in calls if c.status >= 500 and c.status != 503], "a 5xx other than 503"
        api = [c for c in calls if c.path.startswith("/api/")]
        assert all(c.content_type == "application/json" for c in api), {c.content_type for c in api}
        while_down = [c for c in calls if c.started > down_from and c.ended < down_until]
        assert while_down, "no request was made while the database was down"
        assert {(c.path, c.status) for c in while_down} == {
            ("/api/jobs/", 503),
            ("/api/jobs/?page_size=5", 503),
            ("/healthz", 503),
        }
        assert {c.retry_after for c in while_down if c.path.startswith("/api/")} == {"5"}
        assert all(
            b'"detail": "The database is unavailable; try again in a few seconds."' in c.body
            or b'"detail":"The database is unavailable; try again in a few seconds."' in c.body
            for c in while_down
            if c.path.startswith("/api/")
        )
        before = [c for c in calls if c.ended < stopping]
        after = [c for c in calls if c.started > up_at]
        assert {c.status for c in before} == {200, 201}
        assert {(c.path, c.status) for c in after if c.status != 503} >= {
            ("/api/jobs/", 201),
            ("/api/jobs/?page_size=5", 200),
            ("/healthz", 200),
        }

        # Nothing half-written: every stored job has its submitted event, and every job a
        # client was told about (201) is stored.
        accepted = {
            int(c.body.split(b'"id":', 1)[1].split(b",", 1)[0]) for c in calls if c.status == 201
        }
        with psycopg.connect(pg.url()) as db:
            rows = db.execute(
                "SELECT j.id, count(e.id) FROM queues_job j LEFT JOIN queues_jobevent e "
                "ON e.job_id = j.id AND e.kind = 'submitted' GROUP BY j.id"
            ).fetchall()
        assert all(events == 1 for _, events in rows), rows
        assert accepted <= {job_id for job_id, _ in rows}
    finally:
        pg.remove()


def _answers(portal: str) -> bool:
    try:
        return call(f"{portal}/healthz", timeout=5).status == 200
    except OSError:
        return False
