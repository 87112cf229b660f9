"""Celery tasks of the queues app: thin, they take ids (or nothing) and call one service."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from queues.models import Lease
from queues.services import lease_acquire

REQUEST = "reconcile-request"
# A request older than this is assumed lost (its message dropped) and the next one enqueues.
REQUEST_TTL = timedelta(seconds=30)


@shared_task(name="queues.reconcile", acks_late=True, ignore_result=True)
def reconcile() -> str:
    """One reconcile cycle (beat runs it every few seconds; submissions ask for one)."""
    from queues.cluster.adapter import cluster_from_settings
    from queues.reconcile import reconcile_cycle

    # Requests made from now on need a new cycle: let the next one enqueue.
    Lease.objects.filter(name=REQUEST).update(expires_at=timezone.now())
    cluster = cluster_from_settings()
    try:
        report = reconcile_cycle(cluster=cluster, holder=f"{socket.gethostname()}:{os.getpid()}")
    finally:
        cluster.close()
    return report.summary()


def request_reconcile() -> bool:
    """Ask for a reconcile once the current transaction commits. Requests coalesce: while one
    is queued and not yet started, further requests enqueue nothing (returns False)."""
    if not lease_acquire(name=REQUEST, holder=uuid.uuid4().hex, ttl=REQUEST_TTL):
        return False
    transaction.on_commit(lambda: reconcile.apply_async(countdown=1))
    return True
