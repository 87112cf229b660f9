"""The operations dashboard's section on node pools (elastic capacity): how long new nodes took
to come (median, p90) per pool and day, the GPU-hours pool nodes sat ready with nothing on them
(warm but idle), the jobs that waited for a scale-up, and failed provisioning. Kept apart from
``selectors.py`` (one function, one template include: ``ops/_node_pools.html``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import Q

from queues.models import (
    NodePool,
    NodeProvisioning,
    PoolNode,
    ProvisioningState,
    nearest_rank,
)


@dataclass
class LeadDay:
    day: date
    nodes: int
    median: timedelta
    p90: timedelta


@dataclass
class PoolReport:
    name: str
    gpu_class: str
    expected_median: timedelta
    expected_p90: timedelta
    learned_from: int
    nodes_came: int = 0
    median: timedelta | None = None
    p90: timedelta | None = None
    by_day: list[LeadDay] = field(default_factory=list)
    warm_idle_gpu_hours: float = 0.0
    jobs_waited: int = 0
    requests: int = 0
    failed: int = 0
    last_failure: str = ""


def node_pools_report(*, now: datetime, days: int) -> list[PoolReport]:
    """Every pool (active or not, if it ever had nodes) over the last ``days`` days."""
    since = now - timedelta(days=days)
    reports = []
    for pool in NodePool.objects.select_related("gpu_class").order_by("name"):
        median, p90, learned = pool.lead_times()
        report = PoolReport(pool.name, pool.gpu_class.name, median, p90, learned)
        came = list(
            PoolNode.objects.filter(
                pool=pool, requested_at__isnull=False, ready_at__gte=since
            ).values_list("requested_at", "ready_at")
        )
        leads = [(ready - asked).total_seconds() for asked, ready in came if asked is not None]
        report.nodes_came = len(leads)
        if leads:
            report.median = timedelta(seconds=round(nearest_rank(leads, 0.5)))
            report.p90 = timedelta(seconds=round(nearest_rank(leads, 0.9)))
        per_day: dict[date, list[float]] = defaultdict(list)
        for asked, ready in came:
            if asked is not None:
                per_day[ready.date()].append((ready - asked).total_seconds())
        report.by_day = [
            LeadDay(
                day,
                len(values),
                timedelta(seconds=round(nearest_rank(values, 0.5))),
                timedelta(seconds=round(nearest_rank(values, 0.9))),
            )
            for day, values in sorted(per_day.items())
        ]
        idle = PoolNode.objects.filter(pool=pool).filter(
            Q(removed_at__isnull=True) | Q(removed_at__gte=since)
        )
        report.warm_idle_gpu_hours = sum(n.idle_seconds * n.gpus for n in idle) / 3600
        made = list(NodeProvisioning.objects.filter(pool=pool, requested_at__gte=since))
        report.requests = len(made)
        report.failed = sum(1 for a in made if a.state == ProvisioningState.FAILED)
        report.jobs_waited = len({job for a in made for job in a.for_jobs})
        failures = [a for a in made if a.state == ProvisioningState.FAILED]
        if failures:
            report.last_failure = max(failures, key=lambda a: a.requested_at).failure
        if report.requests or report.nodes_came or idle.exists() or pool.active:
            reports.append(report)
    return reports
