"""Celery tasks of the queues app: thin, they take ids (or nothing) and call one service."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import timedelta

from celery import Task, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from portal.logs import REQUEST_ID
from queues.cluster.adapter import cluster_from_settings
from queues.cluster.mirror import ClusterMirror
from queues.models import Lease
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.leases import lease_acquire

logger = logging.getLogger(__name__)

REQUEST = "reconcile-request"
# A request older than this is assumed lost (its message dropped) and the next one enqueues.
REQUEST_TTL = timedelta(seconds=30)
MIRROR_SYNC_SECONDS = 30.0


_MIRROR: ClusterMirror | None = None
_MIRROR_LOCK = threading.Lock()


def worker_mirror() -> ClusterMirror:
    """This worker process's watch-fed mirror of the cluster, started on first use (once, even
    when two tasks start at the same time in two threads)."""
    global _MIRROR
    with _MIRROR_LOCK:
        if _MIRROR is None:
            mirror = ClusterMirror(cluster_from_settings()).start()
            mirror.wait_synced(MIRROR_SYNC_SECONDS)
            _MIRROR = mirror
    return _MIRROR


@shared_task(
    bind=True,
    name="queues.reconcile",
    acks_late=True,
    ignore_result=True,
    # The cluster being unreachable is no error here: the cycle records it and carries on. A
    # database that went away mid-cycle is retried with backoff (a cycle is idempotent: what
    # it wrote stays written, what it did not, the next cycle does); beat starts a fresh one
    # every few seconds anyway, so a few tries are enough.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=3,
)
def reconcile(self: Task) -> str:
    """One reconcile cycle (beat runs it every few seconds; submissions ask for one). It reads
    the worker's watch-fed mirror, so it calls the API only for what it changes. Its log lines
    carry the task's id as their request id."""
    token = REQUEST_ID.set(self.request.id or "")
    try:
        # Requests made from now on need a new cycle: let the next one enqueue.
        Lease.objects.filter(name=REQUEST).update(expires_at=timezone.now())
        mirror = worker_mirror()
        report = reconcile_cycle(cluster=mirror.cluster, holder=cycle_holder(), mirror=mirror)
        summary = report.summary()
        # A cycle with nothing to do is the common case every few seconds: not worth a line.
        quiet = not (report.changed() or report.unreachable)
        logger.log(logging.DEBUG if quiet else logging.INFO, "reconcile: %s", summary)
        return summary
    finally:
        REQUEST_ID.reset(token)


def cycle_holder() -> str:
    """Who holds the reconcile lease for one run of the task: unique per run, not per process.
    Celery runs a countdown task from its timer thread while the solo pool runs another in the
    main thread, so two cycles can overlap in one process; a per-process holder would let the
    second renew the first's lease and both would write at once."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def request_reconcile() -> bool:
    """Ask for a reconcile once the current transaction commits. Requests coalesce: while one
    is queued and not yet started, further requests enqueue nothing (returns False). Off with
    RECONCILE_ON_COMMIT=false (the tests drive cycles themselves; beat still runs them)."""
    if not settings.RECONCILE_ON_COMMIT:
        return False
    if not lease_acquire(name=REQUEST, holder=uuid.uuid4().hex, ttl=REQUEST_TTL):
        return False
    transaction.on_commit(_enqueue_reconcile)
    return True


def _enqueue_reconcile() -> None:
    """Send the request; a broker that is down is no reason to fail what was committed (the
    database is the source of truth and beat's periodic cycle catches up). The request is
    withdrawn so that the next submission tries again."""
    try:
        reconcile.apply_async(countdown=1, retry=False)
    except KombuOperationalError as exc:
        Lease.objects.filter(name=REQUEST).update(expires_at=timezone.now())
        logger.warning("could not ask for a reconcile, the broker is unavailable: %s", exc)
