"""/metrics in Prometheus' text format, with the official client library. Gauges are computed
from the database at scrape time (so every web worker answers the same); counters and
histograms are the database's ``MetricCounter`` rows that the reconcile, the cluster adapter's
error counts and Celery's failure signal add to from any process (``queues.counters``)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from chargeback.budgets import BudgetCollector
from chargeback.ops.headline import allowed_classes, class_weeks, week_bounds
from chargeback.ops.selectors import (
    STATES,
    capacity_samples_at,
    cluster_status,
    counters,
    latest_minute,
    pending_by_queue_reason,
    running_by_class_team,
)
from portal.celery import app as celery_app
from queues.counters import (
    CELERY_TASK_FAILURES,
    CLUSTER_API_ERROR_KINDS,
    CLUSTER_API_ERRORS,
    CYCLE_BUCKETS,
    GPU_ALLOCATED_SECONDS,
    GPU_BUSY_SECONDS,
    INF,
    QUEUE_WAIT_SECONDS,
    RECONCILE_CYCLE_SECONDS,
    RECONCILE_ERROR_KINDS,
    RECONCILE_ERRORS,
    WAIT_BUCKETS,
)
from queues.models import GpuClass, MaintenanceState, Node, Queue, QueueStats, Team, TeamStats

PREFIX = "gpuportal"
NODE_STATES = (
    "in_service",
    MaintenanceState.CORDONED.value,
    MaintenanceState.DRAINING.value,
    "unhealthy",
)


def _histogram(
    name: str,
    documentation: str,
    stored: dict[str, dict[str, float]],
    base: str,
    bounds: tuple[float, ...],
    label: str | None,
) -> HistogramMetricFamily:
    """A histogram from its stored per-bucket counters (made cumulative here)."""
    family = HistogramMetricFamily(name, documentation, labels=[label] if label else [])
    buckets = stored.get(f"{base}_bucket", {})
    counts = stored.get(f"{base}_count", {})
    sums = stored.get(f"{base}_sum", {})
    for key in sorted(counts):
        cumulative = 0.0
        points = []
        for bound in [*(repr(b) for b in bounds), INF]:
            cumulative += buckets.get(f"{key}|{bound}" if label else bound, 0.0)
            points.append((bound, cumulative))
        family.add_metric([key] if label else [], points, sum_value=sums.get(key, 0.0))
    return family


def _counter(
    name: str,
    documentation: str,
    label: str,
    values: dict[str, float],
    known: tuple[str, ...] = (),
) -> CounterMetricFamily:
    """A counter by ``label``; the ``known`` label values are exported at zero until counted,
    so that increase() sees their first count."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, value in sorted({**dict.fromkeys(known, 0.0), **values}.items()):
        family.add_metric([key], value)
    return family


def _class_team_counter(
    name: str, documentation: str, values: dict[str, float], classes: list[str], teams: list[str]
) -> CounterMetricFamily:
    """A counter by GPU class and team (stored as "<class>|<team>"), every active class × team
    exported from zero."""
    family = CounterMetricFamily(name, documentation, labels=["gpu_class", "team"])
    keys = {f"{c}|{t}": 0.0 for c in classes for t in teams}
    for key, value in sorted({**keys, **values}.items()):
        gpu_class, _, team = key.partition("|")
        family.add_metric([gpu_class, team], value)
    return family


@functools.cache
def _portal_tasks() -> tuple[str, ...]:
    """The portal's own Celery task names (its failures are exported from zero): the modules
    the app autodiscovers are imported first, as a worker does when it starts."""
    celery_app.loader.import_default_modules()
    return tuple(sorted(n for n in celery_app.tasks if not n.startswith(("celery.", "tests."))))


class PortalCollector(Collector):
    """Everything the portal exports, read from the database when collected."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            f"{PREFIX}_pending_jobs",
            "Pending jobs by queue and binding reason (the first of their stored reasons).",
            labels=["queue", "reason"],
        )
        for row in pending_by_queue_reason():
            pending.add_metric([row["queue__name"], row["code"] or "none"], row["n"])
        yield pending

        running = GaugeMetricFamily(
            f"{PREFIX}_running_jobs",
            "Running jobs by GPU class and team.",
            labels=["gpu_class", "team"],
        )
        for row in running_by_class_team():
            running.add_metric([row["gpu_class__name"], row["team__name"]], row["jobs"])
        yield running

        held = GaugeMetricFamily(
            f"{PREFIX}_gpus_held",
            "GPU-equivalents the portal's jobs hold by GPU class and team (last reconcile).",
            labels=["gpu_class", "team"],
        )
        for stats in TeamStats.objects.select_related("team").order_by("team__name"):
            for gpu_class, amount in sorted(stats.held.items()):
                held.add_metric([gpu_class, stats.team.name], float(amount))
        yield held

        minute = latest_minute()
        samples = capacity_samples_at(minute)
        capacity = GaugeMetricFamily(
            f"{PREFIX}_capacity_gpus",
            "GPU-equivalents by GPU class and state (in_use, free, reserved_idle, unhealthy, "
            "maintenance, outside), as the last reconcile saw them.",
            labels=["gpu_class", "state"],
        )
        slots = GaugeMetricFamily(
            f"{PREFIX}_gang_slots",
            "Pods of `gpus` whole GPUs that would fit on the free GPUs now (fragmentation).",
            labels=["gpu_class", "gpus"],
        )
        largest = GaugeMetricFamily(
            f"{PREFIX}_largest_free_gpus_per_node",
            "The most free whole GPUs on one in-service node.",
            labels=["gpu_class"],
        )
        for sample in samples:
            for state in STATES:
                capacity.add_metric([sample.gpu_class.name, state], float(getattr(sample, state)))
            for size, count in sorted(sample.slots.items(), key=lambda kv: int(kv[0])):
                slots.add_metric([sample.gpu_class.name, size], count)
            largest.add_metric([sample.gpu_class.name], sample.largest_free)
        yield capacity
        yield slots
        yield largest

        target = GaugeMetricFamily(
            f"{PREFIX}_queue_wait_target_seconds",
            "Each queue's published wait target.",
            labels=["queue"],
        )
        p90 = GaugeMetricFamily(
            f"{PREFIX}_queue_wait_p90_seconds",
            "Each queue's p90 wait over its history window (as the catalog publishes it).",
            labels=["queue"],
        )
        stats_by_queue = {s.queue_id: s for s in QueueStats.objects.all()}
        for queue in Queue.objects.active().order_by("name"):
            target.add_metric([queue.name], queue.expected_wait_target.total_seconds())
            st = stats_by_queue.get(queue.pk)
            if st is not None and st.wait_p90 is not None:
                p90.add_metric([queue.name], st.wait_p90.total_seconds())
        yield target
        yield p90

        stored = counters()
        yield _histogram(
            f"{PREFIX}_queue_wait_seconds",
            "Waits (admitted minus submitted) of the jobs the reconcile admitted, by queue.",
            stored,
            QUEUE_WAIT_SECONDS,
            WAIT_BUCKETS,
            "queue",
        )
        yield _histogram(
            f"{PREFIX}_reconcile_cycle_seconds",
            "Duration of reconcile cycles.",
            stored,
            RECONCILE_CYCLE_SECONDS,
            CYCLE_BUCKETS,
            None,
        )
        yield _counter(
            f"{PREFIX}_reconcile_errors",
            "Reconcile cycles that failed, by exception.",
            "kind",
            stored.get(RECONCILE_ERRORS, {}),
            RECONCILE_ERROR_KINDS,
        )
        yield _counter(
            f"{PREFIX}_cluster_api_errors",
            "Failed requests to the cluster's API, by kind (connection, http_<status>).",
            "kind",
            stored.get(CLUSTER_API_ERRORS, {}),
            CLUSTER_API_ERROR_KINDS,
        )
        yield _counter(
            f"{PREFIX}_celery_task_failures",
            "Celery tasks that failed, by task.",
            "task",
            stored.get(CELERY_TASK_FAILURES, {}),
            _portal_tasks(),
        )

        classes = list(GpuClass.objects.active().order_by("name").values_list("name", flat=True))
        teams = list(Team.objects.active().order_by("name").values_list("name", flat=True))
        yield _class_team_counter(
            f"{PREFIX}_gpu_allocated_seconds",
            "GPU-seconds the portal's pods held (GPU-equivalents × seconds), by GPU class and "
            "team: the duty cycle's denominator (counted every few minutes with Prometheus).",
            stored.get(GPU_ALLOCATED_SECONDS, {}),
            classes,
            teams,
        )
        yield _class_team_counter(
            f"{PREFIX}_gpu_busy_seconds",
            "Of those, the GPU-seconds DCGM saw busy (held × average GPU utilization).",
            stored.get(GPU_BUSY_SECONDS, {}),
            classes,
            teams,
        )

        lost = GaugeMetricFamily(
            f"{PREFIX}_gpu_hours_lost",
            "GPU-hours lost over the last 7 days (/ops/'s headline week) by GPU class and kind: "
            "preemption, failures, reserved_idle, stranded (idle allocations: allocated minus "
            "busy seconds).",
            labels=["gpu_class", "kind"],
        )
        _, week_start, week_end = week_bounds(self.now)
        for week in class_weeks(
            week_start, week_end, classes, allowed_classes(), None, waits=False
        ):
            for kind, value in (
                ("preemption", week.preempted),
                ("failures", week.failed),
                ("reserved_idle", week.reserved_idle),
                ("stranded", week.stranded),
            ):
                lost.add_metric([week.gpu_class, kind], float(value))
        yield lost

        nodes = GaugeMetricFamily(
            f"{PREFIX}_nodes",
            "GPU nodes by GPU class and state (in_service, cordoned, draining, unhealthy).",
            labels=["gpu_class", "state"],
        )
        counts = {(c, s): 0 for c in classes for s in NODE_STATES}
        for name, healthy, maintenance in Node.objects.filter(
            gpu_class__name__in=classes
        ).values_list("gpu_class__name", "healthy", "maintenance"):
            state = "unhealthy" if not healthy else maintenance or "in_service"
            counts[(name, state)] += 1
        for (name, state), count in sorted(counts.items()):
            nodes.add_metric([name, state], count)
        yield nodes

        status = cluster_status()
        reachable = GaugeMetricFamily(
            f"{PREFIX}_cluster_reachable", "1 when the last reconcile reached the cluster."
        )
        last_cycle = GaugeMetricFamily(
            f"{PREFIX}_reconcile_last_cycle_timestamp_seconds",
            "When the last reconcile cycle ended (Unix time).",
        )
        last_seconds = GaugeMetricFamily(
            f"{PREFIX}_reconcile_last_cycle_seconds", "How long the last reconcile cycle took."
        )
        if status is not None:
            reachable.add_metric([], 1.0 if status.reachable else 0.0)
            if status.last_cycle_at is not None:
                last_cycle.add_metric([], status.last_cycle_at.timestamp())
            if status.last_cycle_seconds is not None:
                last_seconds.add_metric([], status.last_cycle_seconds)
        yield reachable
        yield last_cycle
        yield last_seconds


def metrics_text(*, now: datetime) -> tuple[bytes, str]:
    """The exposition and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector(now))
    registry.register(BudgetCollector(now))
    return generate_latest(registry), CONTENT_TYPE_LATEST
