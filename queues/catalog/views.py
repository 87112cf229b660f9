"""HTML pages of the queue catalog. Thin: they ask selectors and render."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from portal.http import PortalRequest
from queues.catalog import charts
from queues.catalog.selectors import (
    class_availability,
    free_devices,
    node_pools_now,
    queue_pending,
    queue_wait_history,
    queues_live,
    queues_visible_to,
    teams_for,
    with_pool_terms,
)


@login_required
def catalog(request: PortalRequest) -> HttpResponse:
    queues = list(with_pool_terms(queues_visible_to(request.user)))
    live = queues_live(queues, request.user, now=timezone.now())
    classes = sorted({g.name for q in queues for g in q.allowed_gpu_classes.all()})
    availability = class_availability(classes, list(live.values())) if queues else []
    return render(
        request,
        "queues/catalog.html",
        {
            "queues": [(queue, live[queue.pk]) for queue in queues],
            "my_teams": teams_for(request.user),
            "availability": availability,
            "free_devices": free_devices(),
            "node_pools": node_pools_now(classes) if classes else [],
            "charts": [("free", json.loads(charts.free_vs_total(availability)))]
            if availability
            else [],
        },
    )


@login_required
def queue_detail(request: PortalRequest, name: str) -> HttpResponse:
    queue = get_object_or_404(with_pool_terms(queues_visible_to(request.user)), name=name)
    allowed = list(queue.allowed_gpu_classes.all())
    capabilities = [
        (capability, capability.resolve(allowed))
        for capability in queue.allowed_capability_classes.all()
    ]
    pending, pending_total = queue_pending(queue, request.user)
    now = timezone.now()
    live = queues_live([queue], request.user, now=now)[queue.pk]
    availability = class_availability([g.name for g in allowed], [live])
    waits = queue_wait_history(queue, now=now)
    return render(
        request,
        "queues/queue_detail.html",
        {
            "queue": queue,
            "capabilities": capabilities,
            "my_teams": teams_for(request.user),
            "live": live,
            "pending": pending,
            "pending_total": pending_total,
            "availability": availability,
            "charts": [
                ("free", json.loads(charts.free_vs_total(availability))),
                ("waits", json.loads(charts.wait_history(waits, queue.expected_wait_target))),
            ],
            "waits": waits,
            "free_devices": free_devices(),
            "node_pools": node_pools_now([g.name for g in allowed]) if allowed else [],
        },
    )
