"""A real worker consumes a task from the configured broker (Redis in CI, files by default)."""

from __future__ import annotations

import pytest
from celery.contrib.testing.worker import start_worker

from portal.celery import app
from portal.tasks import ping


@pytest.fixture
def worker():
    # Results come back through an in-process backend: the worker runs in this process's thread.
    previous = app.conf.result_backend
    app.conf.result_backend = "cache+memory://"
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        app.conf.result_backend = previous


def test_a_task_goes_through_the_broker_to_a_worker(worker, settings):
    result = ping.delay()

    assert result.get(timeout=20) == "pong"
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
