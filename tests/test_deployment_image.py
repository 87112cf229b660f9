"""The image and the compose file keep their rules, and the image's steps, replayed without
Docker, give a portal that passes ``check --deploy`` and serves ``/healthz`` under gunicorn.

No Docker engine runs here: the rules are read from docker/Dockerfile and docker/compose.yaml,
and the slow test below repeats the Dockerfile's steps (a virtual environment filled by pip from
constraints.txt, the app's files copied beside it, static files collected, the image's CMD run)
in a temporary directory. What that does not verify is listed in docs/operations.md.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
BUILD_TOOLS = ("gcc", "g++", "make", "build-essential", "python3-dev", "libpq-dev", "git")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [a for k, a in self.instructions if k == keyword]


def dockerfile_stages(text: str) -> list[Stage]:
    """The Dockerfile's stages: each FROM and the instructions after it (continuations joined,
    comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            stages.append(Stage(base=parts[0], name=parts[2] if len(parts) > 2 else ""))
        else:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


STAGES = dockerfile_stages(DOCKERFILE.read_text())
FINAL = STAGES[-1]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not in exec form: {args}"
    return value


def test_the_image_is_built_in_two_stages_on_slim_python():
    assert len(STAGES) == 2
    assert all(re.fullmatch(r"python:3\.\d+-slim", s.base) for s in STAGES)
    assert STAGES[0].name == "build"
    # The final stage takes the installed environment from the build stage, nothing else.
    assert [a for a in FINAL.args("COPY") if a.startswith("--from")] == [
        "--from=build /opt/venv /opt/venv"
    ]


def test_the_final_image_has_no_build_tools_no_pip_and_no_simulator():
    final_text = " ".join(a for _, a in FINAL.instructions)
    for tool in BUILD_TOOLS:
        assert not re.search(rf"\b{re.escape(tool)}\b", final_text), tool
    assert "apt-get" not in final_text and "pip " not in final_text
    copied = [a.split()[0] for a in FINAL.args("COPY") if not a.startswith("--from")]
    assert copied == [
        "manage.py",
        "portal",
        "queues",
        "chargeback",
        "templates",
        "static",
        "examples/policy.yaml",
    ]
    # The environment is made without pip; only the build stage's pip writes into it.
    assert "python -m venv --without-pip /opt/venv" in STAGES[0].args("RUN")[0]
    # The build context leaves the simulator, the tests and local state out.
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"simcluster", "tests", "bench", ".venv", "var"} <= set(ignored)


def test_the_final_image_collects_static_files_and_runs_gunicorn_as_a_non_root_user():
    (run,) = FINAL.args("RUN")
    assert "python manage.py collectstatic --noinput" in run
    assert "useradd --system --uid 10001" in run
    keywords = [k for k, _ in FINAL.instructions]
    # USER comes after the last RUN, so that nothing later runs as root, and names a uid.
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    assert FINAL.args("USER") == ["10001"]
    assert exec_form(FINAL.args("CMD")[0])[:2] == ["gunicorn", "portal.wsgi"]
    assert "/healthz" in FINAL.args("HEALTHCHECK")[0]


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_runs_web_worker_one_beat_postgresql_and_redis_with_health_checks():
    services = compose()["services"]

    assert set(services) == {"db", "redis", "migrate", "web", "worker", "beat"}
    commands = {name: " ".join(s.get("command", [])) for name, s in services.items()}
    beats = [
        name for name, command in commands.items() if re.search(r"\bbeat\b|--beat|-B\b", command)
    ]
    assert beats == ["beat"]
    assert "replicas" not in json.dumps(services["beat"])
    for name in ("db", "redis", "web", "worker", "beat"):
        assert services[name]["healthcheck"]["test"], name
    assert services["db"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"] == {
            "db": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
            "migrate": {"condition": "service_completed_successfully"},
        }, name


def test_compose_takes_every_secret_from_the_environment_and_points_at_its_own_services():
    services = compose()["services"]
    for name in ("migrate", "web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["SECRET_KEY"] == "${SECRET_KEY:?set SECRET_KEY}"
        assert env["DATABASE_URL"] == (
            "postgres://portal:${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}@db:5432/portal"
        )
        assert env["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        assert env["CLUSTER_MODE"] == "kubeconfig"  # never the simulated cluster
    assert (
        services["db"]["environment"]["POSTGRES_PASSWORD"]
        == "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    )
    # Published on the loopback interface only: a proxy in front terminates TLS.
    assert services["web"]["ports"] == ["127.0.0.1:8000:8000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def image_paths(text: str, tmp_path: Path) -> str:
    """The image's absolute paths, moved under ``tmp_path``."""
    for path, there in (("/opt/venv", "opt-venv"), ("/app", "app"), ("/var/lib/gpu-portal", "var")):
        text = text.replace(path, str(tmp_path / there))
    return text


@pytest.mark.slow
def test_the_images_steps_give_a_portal_that_passes_check_deploy_and_serves_healthz(tmp_path):
    """The Dockerfile's own RUN and COPY lines, with its paths moved into a temporary directory."""
    src, venv, app = tmp_path / "src", tmp_path / "opt-venv", tmp_path / "app"
    # `python` is the interpreter Python's image has; `pip`, one that installs into another.
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    (shims / "pip").write_text(f'#!/bin/sh\nexec {sys.executable} -m pip "$@"\n')
    (shims / "pip").chmod(0o755)
    path = f"{shims}:{os.environ['PATH']}"
    # Only what the image's ENV sets: the test process's own settings must not leak in.
    base_env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    def copy(stage: Stage, into: Path) -> None:
        into.mkdir()
        for args in stage.args("COPY"):
            if args.startswith("--from"):
                continue
            *sources, target = args.split()
            for source in sources:
                destination = into / (Path(source).name if target.endswith("/") else target)
                if (ROOT / source).is_dir():
                    shutil.copytree(
                        ROOT / source, destination, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, destination)

    # Build stage.
    build = STAGES[0]
    copy(build, src)
    (install,) = build.args("RUN")
    built = subprocess.run(
        ["sh", "-c", image_paths(install, tmp_path)],
        cwd=src,
        env={**base_env, "PIP_NO_CACHE_DIR": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-3000:]

    # Final stage: its ENV, its files, the collectstatic part of its RUN.
    copy(FINAL, app)
    image_env = dict(base_env)
    for args in FINAL.args("ENV"):
        for name, value in (pair.split("=", 1) for pair in shlex.split(args)):
            image_env[name] = image_paths(value.replace("$PATH", path), tmp_path)
    (final_run,) = FINAL.args("RUN")
    (collect,) = [step.strip() for step in final_run.split("&&") if "collectstatic" in step]
    collected = subprocess.run(
        ["sh", "-c", collect], cwd=app, env=image_env, capture_output=True, text=True, timeout=300
    )
    assert collected.returncode == 0, collected.stderr[-3000:]
    assert (app / "staticfiles" / "staticfiles.json").exists()
    python = str(venv / "bin" / "python")

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, *args],
            cwd=app,
            env={**image_env, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )

    # What the image holds: the portal from /app, not the simulator, the tests or a pip.
    probe = run(
        "-c",
        "import portal, importlib.util as u; print(portal.__file__); "
        "print(u.find_spec('simcluster'), u.find_spec('pip'), u.find_spec('pytest'))",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == [str(app / "portal" / "__init__.py"), "None None None"]

    production = {
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'portal.sqlite3'}",
        "LOG_FORMAT": "json",
        # Plain HTTP on loopback, as behind a TLS proxy; tests/portal/test_deploy.py checks the
        # redirect and `check --deploy --fail-level WARNING` with it on.
        "SECURE_SSL_REDIRECT": "false",
    }
    check = run("manage.py", "check", "--deploy", **production)
    assert check.returncode == 0, check.stderr[-3000:]
    migrate = run("manage.py", "migrate", "--noinput", **production)
    assert migrate.returncode == 0, migrate.stderr[-3000:]

    port = free_port()
    command = exec_form(FINAL.args("CMD")[0])
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    command[command.index("--worker-tmp-dir") + 1] = str(tmp_path)  # /dev/shm in the image
    log = (tmp_path / "gunicorn.log").open("w")
    server = subprocess.Popen(
        command,
        cwd=app,
        env={**image_env, **production},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/healthz", headers={"X-Request-ID": "probe-1"}
                )
                with urllib.request.urlopen(request, timeout=5) as response:
                    status, body = response.status, json.loads(response.read())
                    request_id = response.headers["X-Request-ID"]
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "gunicorn did not answer within a minute"
                time.sleep(0.5)
        manifest = json.loads((app / "staticfiles" / "staticfiles.json").read_text())["paths"]
        hashed = manifest["portal/portal.css"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/static/{hashed}", timeout=5) as css:
            static_status = css.status
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()

    assert (status, body, request_id) == (200, {"status": "ok", "database": "ok"}, "probe-1")
    assert static_status == 200
    lines = [
        json.loads(line)
        for line in (tmp_path / "gunicorn.log").read_text().splitlines()
        if line.startswith("{")
    ]
    # The last: a first try that timed out while the server warmed up may have its own line.
    health = [x for x in lines if x.get("logger") == "portal.request" and x["path"] == "/healthz"]
    assert (health[-1]["status"], health[-1]["request_id"]) == (200, "probe-1")
