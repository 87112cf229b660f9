"""/ops/ (admins; finance may read) and /metrics (a bearer token): thin, they read selectors and
render."""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from chargeback.capacity import capacity_split
from chargeback.exports import waste_total
from chargeback.ops import charts
from chargeback.ops.elastic import node_pools_report
from chargeback.ops.headline import headline_read
from chargeback.ops.metrics import metrics_text
from chargeback.ops.selectors import (
    STATE_LABELS,
    STATES,
    capacity_over_time,
    capacity_samples_at,
    cluster_status,
    fragmentation_over_time,
    latest_minute,
    longest_waiters,
    node_states,
    node_table,
    pending_now,
    pending_over_time,
    queue_waits,
    team_usage,
    usage_half_life,
)
from chargeback.selectors import waste_lines, waste_team_sums
from queues.cluster.prometheus import PrometheusUnavailable, prometheus_from_settings
from queues.jobs.duty import duty_by, duty_lines
from queues.operations.access import audit_reader_required

# How far back each part of the page looks.
DAYS = 30  # capacity, allocation and SLO by day
HOURS = 48  # allocation, pending reasons and fragmentation by hour
LAST_DAY = timedelta(hours=24)  # the exact capacity split, waste and the duty cycle


@audit_reader_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    minute = latest_minute()
    hour = now.replace(minute=0, second=0, microsecond=0)
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=DAYS - 1)
    hourly_start = hour - timedelta(hours=HOURS - 1)
    samples = capacity_samples_at(minute)
    by_day = capacity_over_time(start=day_start, end=now, bucket="day")
    by_hour = capacity_over_time(start=hourly_start, end=now, bucket="hour")
    pending = pending_now(minute)
    pending_series = pending_over_time(start=hourly_start, end=now, bucket="hour")
    fragmentation = fragmentation_over_time(start=hourly_start, end=now)
    waits = queue_waits(since=day_start.date())
    uses, standings = team_usage(now=now)
    nodes, node_page = node_table(page=request.GET.get("nodes"))
    headline = headline_read(now=now, prometheus=prometheus_from_settings())
    figures = [
        ("capacity-now", charts.capacity_now(samples)),
        ("capacity-days", charts.capacity_over_time(by_day)),
        ("allocation-days", charts.allocation(by_day, title="Allocation by day", hourly=False)),
        ("allocation-hours", charts.allocation(by_hour, title="Allocation by hour", hourly=True)),
        ("waits", charts.waits(waits)),
        ("slo", charts.slo(waits)),
        ("pending-now", charts.pending_now(pending)),
        ("pending-hours", charts.pending_over_time(pending_series)),
        ("fragmentation-now", charts.fragmentation_now(samples)),
        ("fragmentation-hours", charts.fragmentation_over_time(fragmentation)),
        ("team-usage", charts.team_usage(uses)),
    ]
    context = {
        "now": now,
        "headline": headline,
        "minute": minute,
        "status": cluster_status(),
        "states": [(s, STATE_LABELS[s]) for s in STATES],
        "samples": samples,
        "by_day": by_day,
        "pending": pending,
        "waiters": longest_waiters(now=now),
        "waits": waits,
        "uses": uses,
        "standings": standings,
        "half_life": usage_half_life(),
        "nodes": nodes,
        "node_page": node_page,
        "node_states": node_states(),
        "days": DAYS,
        "hours": HOURS,
        "charts": figures,
        "node_pools": node_pools_report(now=now, days=DAYS),
    }
    return render(request, "ops/dashboard.html", context)


@audit_reader_required
@require_GET
def last_day(request: HttpRequest) -> HttpResponse:
    """The dashboard's part over the last 24 hours that reads usage intervals and asks
    Prometheus: chargeback's exact capacity split and waste, and the GPU duty cycle. The page
    loads it after itself (htmx), so neither a month of usage nor a slow Prometheus holds up
    the rest."""
    now = timezone.now()
    duty: dict[str, Any] = {"configured": False}
    prometheus = prometheus_from_settings()
    waste = waste_lines(
        start=now - LAST_DAY, end=now, now=now, team_ids=None, prometheus=prometheus
    )
    if prometheus is not None:
        try:
            lines = duty_lines(prometheus, start=now - LAST_DAY, end=now)
        except PrometheusUnavailable as exc:
            duty = {"configured": True, "error": str(exc)}
        else:
            duty = {
                "configured": True,
                "teams": duty_by(lines, "team"),
                "queues": duty_by(lines, "queue"),
                "jobs": sorted(lines, key=lambda x: (-x.idle_gpu_hours, x.job_id))[:20],
                "shared": any(x.shared for x in lines),
            }
    # no waste, no chart: an empty chart is a bare axis that reads as a broken page
    figures = [("waste", charts.waste(waste_team_sums(waste)))] if waste else []
    if duty.get("teams") is not None:
        figures.append(("duty", charts.duty(duty["teams"])))
    context = {
        "exact": capacity_split(start=now - LAST_DAY, end=now, now=now),
        "waste": waste,
        "waste_totals": waste_total(waste),
        "duty": duty,
        "charts": figures,
    }
    return render(request, "ops/_last_day.html", context)


def _authorized(request: HttpRequest) -> bool:
    """A caller with ``Authorization: Bearer <METRICS_TOKEN>``; nobody when the token is unset."""
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given, token)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, computed from the database at scrape time."""
    if not _authorized(request):
        response = HttpResponse(
            "a bearer token is required\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type = metrics_text(now=timezone.now())
    return HttpResponse(body, content_type=content_type)
