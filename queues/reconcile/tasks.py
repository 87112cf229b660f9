"""Celery tasks of the queues app: thin, they take ids (or nothing) and call one service."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
import uuid
from datetime import timedelta

from celery import Task, current_app, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from portal.logs import REQUEST_ID
from queues.cluster.adapter import cluster_from_settings
from queues.cluster.mirror import ClusterMirror
from queues.models import Lease
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.leases import lease_acquire, lease_held
from queues.reconcile.snapshot import usage_rows_kept
from queues.reconcile.trigger import Coalescer

logger = logging.getLogger(__name__)

REQUEST = "reconcile-request"
# A request older than this is assumed lost (its message dropped) and the next one enqueues.
REQUEST_TTL = timedelta(seconds=30)
MIRROR_SYNC_SECONDS = 30.0
# A cycle asked for while another holds the lease runs this long after, to see whether it is
# free by then: the request is never dropped, and the running cycle is never joined.
FOLLOW_UP_SECONDS = 0.2
# The worker's full garbage collections: at most this often, between two cycles (``worker_gc``).
FULL_COLLECTION_SECONDS = 60.0


_MIRROR: ClusterMirror | None = None
_NUDGER: Coalescer | None = None
_MIRROR_LOCK = threading.Lock()


def _close_own_connection() -> None:
    connection.close()  # the calling thread's own: Django's connections are per thread


def worker_mirror() -> ClusterMirror:
    """This worker process's watch-fed mirror of the cluster, started on first use (once, even
    when two tasks start at the same time in two threads). When the watch reports GPUs given
    back (a pod or a Job ended), it asks for a cycle: bursts of ends coalesce into one request
    while one is being made, and requests coalesce again on the request lease."""
    global _MIRROR, _NUDGER
    with _MIRROR_LOCK:
        if _MIRROR is None:
            _NUDGER = Coalescer(
                request_reconcile_now, name="reconcile-nudger", done=_close_own_connection
            ).start()
            mirror = ClusterMirror(cluster_from_settings(), on_freed=_NUDGER.request).start()
            mirror.wait_synced(MIRROR_SYNC_SECONDS)
            _MIRROR = mirror
    return _MIRROR


def worker_mirror_stop() -> None:
    """Stop this process's mirror and its nudger (a worker shutting down; tests)."""
    global _MIRROR, _NUDGER
    with _MIRROR_LOCK:
        if _MIRROR is not None:
            _MIRROR.stop()
        if _NUDGER is not None:
            _NUDGER.stop()
        _MIRROR = _NUDGER = None


# --- Garbage collection in the worker ------------------------------------------------------------
#
# The worker keeps a large heap that lives long: the mirror (every pod and Job of the last hour,
# as JSON), the snapshot's waiting jobs, the caches of closed usage intervals. A cycle over
# thousands of waiting jobs makes objects that outlive Python's young collections, and the
# automatic full collection then walks the whole heap every second or so: in Kueue's replay,
# 215 full collections of about 0.2 s each, a fifth of the worker's time (docs/benchmarks.md).
# In the worker, automatic full collections are off; one runs between two cycles, at most once
# a minute, and the heap the worker started with is frozen out of them. Reference counting
# frees everything else as before (the mirror's JSON has no cycles); only cyclic garbage waits
# for the minute's collection. Other processes (web, tests) keep Python's defaults.

_FULL_COLLECTIONS = {"on": False, "last": 0.0}


@worker_ready.connect
def worker_gc(**_: object) -> None:
    """The worker's process-long state: the reconcile's usage memo on, and its garbage
    collection: the start-up heap frozen, full collections by ``collect_if_due`` between
    cycles instead of whenever the young generations overflow."""
    usage_rows_kept()  # the reconcile's snapshots read only usage written since the last
    gc.collect()
    gc.freeze()
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, 2**31 - 1)  # gen1 collections before an automatic full one
    _FULL_COLLECTIONS.update(on=True, last=time.monotonic())


def collect_if_due() -> None:
    """A full collection if the worker's last one is ``FULL_COLLECTION_SECONDS`` old."""
    now = time.monotonic()
    if _FULL_COLLECTIONS["on"] and now - _FULL_COLLECTIONS["last"] >= FULL_COLLECTION_SECONDS:
        gc.collect()
        _FULL_COLLECTIONS["last"] = time.monotonic()


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
    """One reconcile cycle. Submissions and cancellations ask for one as they commit, the
    worker's watch as soon as GPUs are given back, and beat runs one every few seconds as a
    safety net. It reads the worker's watch-fed mirror, so it calls the API only for what it
    changes. If another cycle holds the lease, this one comes back shortly after instead of
    being lost: requests made meanwhile collapse into that one follow-up. Its log lines carry
    the task's id as their request id."""
    token = REQUEST_ID.set(self.request.id or "")
    try:
        # Requests made from now on need a new cycle: let the next one enqueue.
        Lease.objects.filter(name=REQUEST).update(expires_at=timezone.now())
        mirror = worker_mirror()
        report = reconcile_cycle(
            cluster=mirror.cluster,
            holder=cycle_holder(),
            mirror=mirror,
            follow_up=lambda: lease_held(REQUEST),
        )
        if not report.ran and lease_acquire(name=REQUEST, holder=uuid.uuid4().hex, ttl=REQUEST_TTL):
            _enqueue_reconcile(countdown=FOLLOW_UP_SECONDS)
        if report.changed():
            notifications_nudge()
        summary = report.summary()
        # A cycle with nothing to do is the common case: not worth a line.
        quiet = not (report.changed() or report.unreachable)
        logger.log(logging.DEBUG if quiet else logging.INFO, "reconcile: %s", summary)
        return summary
    finally:
        REQUEST_ID.reset(token)
        collect_if_due()


NOTIFICATIONS_COLLECT = "queues.notifications.collect"  # by name: notifications is a later layer


# Cycles that changed something ask for a collection at most this often: under churn a cycle
# runs many times a second, and a collection per cycle in the same worker took a seventh of its
# time in the Kueue baseline replay (notices wait NOTIFICATION_BATCH_SECONDS anyway, and beat
# collects every NOTIFICATION_INTERVAL_SECONDS).
NUDGE = "notifications-nudge"
NUDGE_TTL = timedelta(seconds=5)


def notifications_nudge() -> None:
    """Ask for a notifications collection now that a cycle's changes are committed (the job
    timeline is what it reads), unless one was asked for in the last ``NUDGE_TTL``. Off with
    NOTIFY_ON_COMMIT=false; a broker that is down is no reason to fail the cycle: beat's
    periodic collection catches up."""
    if not settings.NOTIFY_ON_COMMIT:
        return
    if not lease_acquire(name=NUDGE, holder=uuid.uuid4().hex, ttl=NUDGE_TTL):
        return
    try:
        current_app.send_task(NOTIFICATIONS_COLLECT, retry=False)
    except KombuOperationalError as exc:
        logger.warning("could not ask for notifications, the broker is unavailable: %s", exc)


def cycle_holder() -> str:
    """Who holds the reconcile lease for one run of the task: unique per run, not per process.
    Celery runs a countdown task from its timer thread while the solo pool runs another in the
    main thread, so two cycles can overlap in one process; a per-process holder would let the
    second renew the first's lease and both would write at once."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def request_reconcile() -> bool:
    """Ask for a reconcile as soon as the current transaction commits. Requests coalesce: while
    one is queued and not yet started, further requests enqueue nothing (returns False). Off
    with RECONCILE_ON_COMMIT=false (the tests drive cycles themselves; beat still runs them)."""
    if not settings.RECONCILE_ON_COMMIT:
        return False
    if not lease_acquire(name=REQUEST, holder=uuid.uuid4().hex, ttl=REQUEST_TTL):
        return False
    # No countdown: the solo pool runs a countdown task from its timer thread, beside the one
    # it is running, and the request is for now.
    transaction.on_commit(_enqueue_reconcile)
    return True


def _enqueue_reconcile(countdown: float | None = None) -> bool:
    """Send the request; a broker that is down is no reason to fail what was committed (the
    database is the source of truth and beat's periodic cycle catches up). The request is
    withdrawn so that the next one tries again."""
    try:
        reconcile.apply_async(countdown=countdown, retry=False)
    except KombuOperationalError as exc:
        Lease.objects.filter(name=REQUEST).update(expires_at=timezone.now())
        logger.warning("could not ask for a reconcile, the broker is unavailable: %s", exc)
        return False
    return True


def request_reconcile_now() -> bool:
    """Ask for a reconcile now, outside any transaction (the worker's watch, when GPUs were
    given back); coalesced as ``request_reconcile``. Runs in the nudger's one long-lived
    thread, which keeps its database connection between calls (as a request thread does, up
    to ``CONN_MAX_AGE``): connecting anew for every burst of pod ends cost more than the
    request itself under churn. A connection that broke is dropped, and the next call opens a
    fresh one."""
    connection.close_if_unusable_or_obsolete()
    try:
        if not lease_acquire(name=REQUEST, holder=uuid.uuid4().hex, ttl=REQUEST_TTL):
            return False
        return _enqueue_reconcile()
    except DatabaseError:
        connection.close()
        raise
