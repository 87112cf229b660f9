"""Smoke test of what a fresh clone runs: SQLite, no broker server, the example policy, served.

Runs the real commands in subprocesses with an empty state folder and no DATABASE_URL or
CELERY_BROKER_URL, whatever database the rest of the suite uses.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def embedded_env(tmp_path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    return {**env, "DEBUG": "true", "PORTAL_VAR_DIR": str(tmp_path / "var")}


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def served(embedded_env) -> Iterator[str]:
    manage(embedded_env, "migrate", "--noinput")
    manage(embedded_env, "apply_policy", "examples/policy.yaml")
    logins = manage(embedded_env, "seed_demo")
    assert "member   mia" in logins
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=embedded_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_fresh_clone_migrates_applies_the_example_and_serves_the_catalog(served, embedded_env):
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    login_page = browser.open(f"{served}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page)[1]
    form = urllib.parse.urlencode(
        {"username": "mia", "password": "demo-portal", "csrfmiddlewaretoken": token, "next": ""}
    ).encode()

    catalog = browser.open(f"{served}/login/", data=form)

    assert catalog.url == f"{served}/queues/"
    html = catalog.read().decode()
    for queue in ("interactive", "interactive-mig", "batch", "training"):
        assert f'id="queue-{queue}"' in html
    database = os.path.join(embedded_env["PORTAL_VAR_DIR"], "portal.sqlite3")
    assert os.path.getsize(database) > 0
    assert os.path.isdir(os.path.join(embedded_env["PORTAL_VAR_DIR"], "celery", "broker"))
