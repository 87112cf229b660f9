"""Real processes for the fault tests: a private Redis, a private PostgreSQL, the portal's
worker and web server, each started by the test on a free port and stopped (or killed) by it.

Nothing here touches the shared PostgreSQL or Redis other tests use.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

from tests.conftest import ROOT

PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], Any], *, seconds: float = 60, what: str = "") -> Any:
    """Poll ``condition`` until it returns something true; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f} s: {what}")
        time.sleep(0.2)


def this_database_url() -> str:
    """The URL of the database this test uses (committed rows: the test must be transactional),
    for processes the test starts."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = quote(s["USER"] or "")
    password = f":{quote(s['PASSWORD'])}" if s["PASSWORD"] else ""
    return f"postgres://{user}{password}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@dataclass
class PrivateRedis:
    """``redis-server`` on a free port with no persistence; stopped and started again on the
    same port."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: self.cli("ping") == "PONG", seconds=20, what="redis answers")
        return self

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=10
        )
        return result.stdout.strip()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of its own in a new temporary directory (``initdb``), on a free
    port, its socket in the directory too; stopped (fast: open connections are cut) and started
    again. (Not under pytest's ``tmp_path``: as root the server runs as ``postgres``, which may
    not enter root's private folders.) ``remove`` deletes it all."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="portal-pg-")))
    port: int = field(default_factory=free_port)

    @property
    def bin(self) -> Path:
        return PG_BIN[-1].parent

    def url(self, database: str = "portal") -> str:
        return f"postgres://portal@127.0.0.1:{self.port}/{database}"

    def init(self) -> PrivatePostgres:
        data = self.directory / "data"
        subprocess.run(
            [self.bin / "initdb", "-D", data, "-U", "portal", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            **self._as_postgres(),
        )
        return self

    def start(self) -> None:
        subprocess.run(
            [
                self.bin / "pg_ctl",
                "-D",
                self.directory / "data",
                "-w",
                "-l",
                self.directory / "log",
                "-o",
                f"-p {self.port} -k {self.directory} -h 127.0.0.1",
                "start",
            ],
            check=True,
            capture_output=True,
            **self._as_postgres(),
        )

    def stop(self) -> None:
        subprocess.run(
            [self.bin / "pg_ctl", "-D", self.directory / "data", "-w", "-m", "fast", "stop"],
            check=True,
            capture_output=True,
            **self._as_postgres(),
        )

    def remove(self) -> None:
        if (self.directory / "data" / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def createdb(self, name: str) -> None:
        subprocess.run(
            [self.bin / "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "portal", name],
            check=True,
            capture_output=True,
        )

    def _as_postgres(self) -> dict[str, Any]:
        """PostgreSQL refuses to run as root: run it as the ``postgres`` user then."""
        if os.geteuid() != 0:
            return {}
        shutil.chown(self.directory, "postgres")
        return {"user": "postgres"}


@dataclass
class PortalProcess:
    """The portal's worker or web server in a process of its own, with the environment a
    deployment gives it."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> PortalProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def kill(self) -> None:
        """SIGKILL: no clean-up, no acknowledgement, as the kernel's OOM killer or a node loss."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def portal_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """A production-like environment for a portal process (DEBUG off, JSON logs)."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return {
        **keep,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "SECRET_KEY": "fault-tests-only-not-a-secret",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STATICFILES_MANIFEST": "false",
        "PORTAL_VAR_DIR": str(tmp_path / "var"),
        "LOG_FORMAT": "json",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback (no TLS proxy in front)
        **env,
    }


def worker(tmp_path: Path, name: str, *, pause_at: str = "", **env: str) -> PortalProcess:
    """A Celery worker with its own beat (solo pool: one process, so SIGKILL takes the whole
    worker), optionally stopping for ever at ``pause_at`` (see tests/faults/worker.py)."""
    return PortalProcess(
        argv=[sys.executable, "-m", "tests.faults.worker"],
        env=portal_env(
            tmp_path,
            FAULT_PAUSE_AT=pause_at,
            FAULT_PAUSE_MARKER=str(tmp_path / f"{name}.paused"),
            BEAT_SCHEDULE=str(tmp_path / f"{name}-beat-schedule"),
            **env,
        ),
        log=tmp_path / f"{name}.log",
    )


def web(tmp_path: Path, port: int, **env: str) -> PortalProcess:
    """gunicorn as the image runs it (two workers), on ``port``."""
    return PortalProcess(
        argv=[
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--timeout",
            "60",
        ],
        env=portal_env(tmp_path, **env),
        log=tmp_path / "web.log",
    )
