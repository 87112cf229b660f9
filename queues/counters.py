"""Counters /metrics exports, kept in the database (``MetricCounter``) so that several gunicorn
workers, the Celery worker and beat all add to one number, and a restart loses none.

A histogram is kept as counters too: one row per bucket (not cumulative; the exporter sums
them), one for the count and one for the sum of observed values."""

from __future__ import annotations

import bisect
import logging
from collections import Counter

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F

from queues.models import MetricCounter

logger = logging.getLogger(__name__)

RECONCILE_ERRORS = "reconcile_errors"
CLUSTER_API_ERRORS = "cluster_api_errors"
CELERY_TASK_FAILURES = "celery_task_failures"
RECONCILE_CYCLE_SECONDS = "reconcile_cycle_seconds"
QUEUE_WAIT_SECONDS = "queue_wait_seconds"
# The duty cycle: GPU-seconds the portal's pods held and those DCGM saw busy, labelled
# "<gpu class>|<team>" (queues.jobs.duty.duty_count); and how far they are counted (Unix time,
# not exported).
GPU_ALLOCATED_SECONDS = "gpu_allocated_seconds"
GPU_BUSY_SECONDS = "gpu_busy_seconds"
DUTY_COUNTED_UNTIL = "duty_counted_until"

# Label values exported at zero before the first one is counted, so that increase() sees the
# first error (a series that appears at 1 has no increase). Others appear when first counted.
RECONCILE_ERROR_KINDS = ("ApiException", "DatabaseError", "OperationalError", "MaxRetryError")
CLUSTER_API_ERROR_KINDS = ("connection", "http_401", "http_403", "http_429", "http_500", "http_503")

# Upper bounds of the histograms' buckets, in seconds (the last one is +Inf).
CYCLE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0, 86400.0)
INF = "+Inf"


def counter_add(name: str, label: str = "", amount: float = 1.0) -> None:
    """Add ``amount`` to counter ``name`` with ``label`` (created at zero on first use). One
    conditional UPDATE, so concurrent processes never lose an increment."""
    if MetricCounter.objects.filter(name=name, label=label).update(value=F("value") + amount):
        return
    try:
        with transaction.atomic():
            MetricCounter.objects.create(name=name, label=label, value=amount)
    except IntegrityError:  # another process created it first
        MetricCounter.objects.filter(name=name, label=label).update(value=F("value") + amount)


def bucket_of(value: float, bounds: tuple[float, ...]) -> str:
    """The label of the first bucket whose upper bound is at least ``value``."""
    index = bisect.bisect_left(bounds, value)
    return INF if index == len(bounds) else repr(bounds[index])


def histogram_observe(
    name: str, value: float, *, bounds: tuple[float, ...], label: str = ""
) -> None:
    """Count one observation of ``value`` in histogram ``name`` (``label`` prefixes the bucket
    label as ``label|le``)."""
    histogram_observe_many(name, [value], bounds=bounds, label=label)


def histogram_observe_many(
    name: str, values: list[float], *, bounds: tuple[float, ...], label: str = ""
) -> None:
    """Count each of ``values`` in histogram ``name``: one write per bucket they fall in, one
    for the count and one for the sum."""
    if not values:
        return
    prefix = f"{label}|" if label else ""
    buckets = Counter(bucket_of(value, bounds) for value in values)
    for bucket, count in sorted(buckets.items()):
        counter_add(f"{name}_bucket", prefix + bucket, count)
    counter_add(f"{name}_count", label, len(values))
    counter_add(f"{name}_sum", label, sum(values))


def counter_add_quietly(name: str, label: str = "") -> None:
    """``counter_add`` where the error being counted may be the database itself: a failure to
    count is logged, never raised over the error it was counting."""
    try:
        counter_add(name, label)
    except DatabaseError:
        logger.exception("could not count %s{%s}", name, label)
