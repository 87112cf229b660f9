"""Celery tasks of the jobs layer: thin, each calls one service."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from queues.cluster.prometheus import PrometheusUnavailable, prometheus_from_settings
from queues.jobs.duty import duty_count


@shared_task(name="queues.duty_count", autoretry_for=(), max_retries=0)
def duty_count_task() -> str:
    """Count the duty cycle since the last count for /metrics (beat: every few minutes). A
    Prometheus that cannot be read is retried by the next run, which counts the whole span."""
    prometheus = prometheus_from_settings()
    if prometheus is None:
        return "PROMETHEUS_URL is not set"
    try:
        span = duty_count(prometheus, now=timezone.now())
    except PrometheusUnavailable as exc:
        return f"not counted: {exc}"
    return f"counted {span.total_seconds():.0f} s"
