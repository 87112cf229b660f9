"""Project-level Celery tasks."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="portal.ping")
def ping() -> str:
    """Answers ``pong``: proves a worker consumes from the configured broker."""
    return "pong"
