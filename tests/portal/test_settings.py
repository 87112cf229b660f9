"""Settings come from the environment and fail loudly when something required is missing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL"}
    }
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL, settings.DEBUG)",
        ],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_secret_key_with_debug_off_fails_clearly(tmp_path):
    result = load_settings(PORTAL_VAR_DIR=str(tmp_path))

    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr


def test_debug_runs_without_a_secret_key_on_the_embedded_defaults(tmp_path):
    result = load_settings(DEBUG="true", PORTAL_VAR_DIR=str(tmp_path), CELERY_BROKER_URL="")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://", "True"]
    assert (tmp_path / "celery" / "broker").is_dir()


def test_database_and_broker_come_from_the_environment(tmp_path):
    result = load_settings(
        SECRET_KEY="s" * 50,
        PORTAL_VAR_DIR=str(tmp_path),
        DATABASE_URL="postgres://portal@db.internal:5432/portal",
        CELERY_BROKER_URL="redis://cache.internal:6379/0",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.postgresql",
        "redis://cache.internal:6379/0",
        "False",
    ]


def test_an_unknown_cluster_mode_is_refused(tmp_path):
    result = load_settings(DEBUG="true", PORTAL_VAR_DIR=str(tmp_path), CLUSTER_MODE="cloud")

    assert result.returncode != 0
    assert "CLUSTER_MODE='cloud': expected one of sim, kubeconfig, in-cluster" in result.stderr


@pytest.mark.django_db
def test_sqlite_is_set_up_for_concurrent_writers():
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "sqlite":
        return  # the suite runs on PostgreSQL in CI; the smoke test covers SQLite there
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    assert options["timeout"] == 20
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
