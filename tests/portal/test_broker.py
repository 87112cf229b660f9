"""A real worker consumes a task from the configured broker (Redis in CI, files by default)."""

from __future__ import annotations

import uuid

from celery import Celery
from celery.contrib.testing.worker import start_worker


def test_a_task_goes_through_the_broker_to_a_worker(settings):
    # A Celery app configured exactly as the portal's (same CELERY_* settings, same broker),
    # with its own queue so that nothing else in the broker is consumed, and an in-process
    # result backend since the worker runs in this process's thread.
    app = Celery("broker-test", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.result_backend = "cache+memory://"
    queue = f"broker-test-{uuid.uuid4().hex}"
    app.conf.task_default_queue = queue

    @app.task(name="broker-test.ping")
    def ping() -> str:
        return "pong"

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        result = ping.delay()
        assert result.get(timeout=20) == "pong"
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
