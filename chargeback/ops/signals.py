"""Celery task failures, counted for /metrics wherever a task fails (the worker's processes
and any process that runs a task eagerly)."""

from __future__ import annotations

from typing import Any

from celery.signals import task_failure

from queues.counters import CELERY_TASK_FAILURES, counter_add_quietly


@task_failure.connect
def count_task_failure(sender: Any = None, **_: Any) -> None:
    """A task raised (after its retries): count it by task name."""
    counter_add_quietly(CELERY_TASK_FAILURES, getattr(sender, "name", "") or "unknown")
