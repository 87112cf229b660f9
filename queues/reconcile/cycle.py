"""One reconcile cycle: cluster → mirror → snapshot → engine → plan → database → cluster.

    sync nodes and pods → move job states from what the cluster reports → open and close usage
    intervals → build the snapshot → plan → store admissions and preemptions → create and
    delete Kubernetes Jobs → note the cluster's health → store the waiting jobs' reasons and
    estimates, the queues' estimates and numbers.

Crash-safe by construction, not by luck: every job state change is a conditional UPDATE on the
state it leaves; Job names are derived from job ids and a create that finds its own Job is
success; a usage interval is keyed by its pod's UID and opened or closed by conditional writes.
Killing the process anywhere and running the next cycle loses nothing and does nothing twice.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from queues import admission as engine
from queues.catalog.services import queue_stats_refresh
from queues.cluster.adapter import Cluster, ClusterRejected, ClusterUnreachable
from queues.cluster.mirror import ClusterMirror
from queues.counters import (
    CLUSTER_API_ERRORS,
    CYCLE_BUCKETS,
    QUEUE_WAIT_SECONDS,
    RECONCILE_CYCLE_SECONDS,
    RECONCILE_ERRORS,
    WAIT_BUCKETS,
    counter_add,
    counter_add_quietly,
    histogram_observe,
    histogram_observe_many,
)
from queues.models import (
    K8S_JOB_STATES,
    ClusterStatus,
    Job,
    JobState,
)
from queues.reconcile.elastic import pools_apply, pools_sync, warm_holds_sync
from queues.reconcile.facts import ClusterView, CycleReport, read_cluster
from queues.reconcile.history import history_record
from queues.reconcile.jobs import jobs_sync, secret_values_mask
from queues.reconcile.leases import lease_acquire, lease_release
from queues.reconcile.nodes import maintenance_preempt, nodes_sync
from queues.reconcile.plan import (
    Refresh,
    cluster_apply,
    creates_forget,
    creates_note,
    new_pending_ids,
    pending_reasons_store,
    plan_apply,
    plan_store_reasons,
    queue_estimates_store,
    refresh_begin,
    refresh_end,
    with_default_probes,
)
from queues.reconcile.snapshot import snapshot_build
from queues.reconcile.usage import usage_sync

logger = logging.getLogger(__name__)

LEASE = "reconcile"
READ_SIDE_LEASE = "reconcile-read-side"
# Under churn the read side is written at most this often (pages poll every 3-10 s).
READ_SIDE_EVERY = timedelta(seconds=2)


# --- The cycle -----------------------------------------------------------------------------------


def reconcile_cycle(
    *,
    cluster: Cluster,
    now: datetime | None = None,
    holder: str = "reconcile",
    mirror: ClusterMirror | None = None,
    follow_up: Callable[[], bool] | None = None,
) -> CycleReport:
    """Run one cycle if no other holds the lease. ``now`` defaults to the wall clock (tests
    pass the simulated cluster's); with a ``mirror`` the cycle reads the watch-fed copy instead
    of listing. ``follow_up`` says whether another cycle is already asked for (the task's
    request), which paces the read side (``read_side_due``)."""
    started = time.monotonic()
    report = CycleReport()
    ttl = timedelta(seconds=settings.RECONCILE_LEASE_SECONDS)
    if not lease_acquire(name=LEASE, holder=holder, ttl=ttl):
        report.ran = False
        return report
    calls_before = cluster.calls
    try:
        now = now or timezone.now()
        return _cycle(cluster, mirror, now=now, report=report, follow_up=follow_up)
    except Exception as exc:
        counter_add_quietly(RECONCILE_ERRORS, type(exc).__name__)
        creates_forget()  # as if the process had died: the next cycle's creates find them
        raise
    finally:
        report.api_calls = cluster.calls - calls_before
        report.seconds = time.monotonic() - started
        try:
            cycle_record(cluster, report=report, now=timezone.now())
        finally:
            lease_release(name=LEASE, holder=holder)


def _cycle(
    cluster: Cluster,
    mirror: ClusterMirror | None,
    *,
    now: datetime,
    report: CycleReport,
    follow_up: Callable[[], bool] | None,
) -> CycleReport:
    # the answers an earlier cycle left (its follow-up: this one), those in by now
    with report.step("earlier answers"):
        _answers_note(report, now=now, wait=False)
    try:
        with report.step("read"):
            view = read_cluster(cluster, mirror)
    except (ClusterUnreachable, ClusterRejected) as exc:
        since = cluster_unreachable(str(exc), now=now)
        report.unreachable = str(exc)
        plan = engine.plan(snapshot_build(now=now, cluster_unreachable_since=since))
        plan_store_reasons(plan, now=now)
        return report
    with report.step("sync"):
        nodes_sync(view, now=now)
        unknown = unknown_jobs(view)
        jobs_sync(view, now=now, report=report)
        secret_values_mask()
        usage_sync(view, now=now, report=report)
        maintenance_preempt(now=now, report=report)
        try:
            pools_sync(cluster, view, now=now)
        except (ClusterUnreachable, ClusterRejected) as exc:
            # the pools' answers are read again next cycle; nothing else waits for them
            logger.warning("could not read the node pools' provisioning requests: %s", exc)
    with report.step("snapshot"):
        refresh = refresh_begin(Job.objects.filter(state=JobState.PENDING).count())
        snapshot = snapshot_build(now=now, forecasts=refresh.full)
    # With thousands waiting, a refresh's forecast takes a second or more, and the admissions
    # (the same with it or without: the engine is deterministic) would wait for it: they are
    # planned without it and applied first, and the forecast follows (``forecast_after``).
    forecast_after = refresh.full and refresh.after
    forecast_now = refresh.full and not forecast_after
    read_side = read_side_due(follow_up) or refresh.full
    with report.step("plan" if forecast_now else "plan (no forecast)"):
        planning = time.monotonic()
        if forecast_now:
            snapshot = with_default_probes(snapshot)
            plan = engine.plan(snapshot)
            refresh.cost += time.monotonic() - planning
        else:
            # Between refreshes only the jobs that show no reasons yet are explained.
            explain = set() if forecast_after or not read_side else new_pending_ids()
            plan = engine.plan(snapshot, estimates=False, explain=explain)
    with report.step("apply"):
        plan_apply(plan, now=now, report=report)
    with report.step("cluster"):
        try:
            cluster_apply(cluster, view, now=now, report=report)
        except ClusterUnreachable as exc:
            cluster_unreachable(str(exc), now=now)
            report.unreachable = str(exc)
    wait = True
    try:
        _read_side(
            snapshot,
            plan,
            refresh,
            cluster,
            now=now,
            report=report,
            read_side=read_side,
            forecast_after=forecast_after,
        )
        # With another cycle asked for already, the answers still out are left to it: it
        # notes the ends of the jobs created first without waiting for the last create.
        wait = follow_up is None or not follow_up()
    finally:
        # What is for reading went on while the creates were answered (the cluster takes a few
        # at a time): a cycle admitting hundreds of jobs spends a second or more on them.
        with report.step("cluster (answers)"):
            _answers_note(report, now=now, wait=wait)
    if not report.unreachable:  # (the node pools' requests may have found it)
        cluster_reachable(now=now, unknown=unknown)
    return report


def _answers_note(report: CycleReport, *, now: datetime, wait: bool) -> None:
    """Note the answers of the creates this process sent (all of them with ``wait``)."""
    unreachable = creates_note(report, wait=wait)
    if unreachable is not None:
        cluster_unreachable(str(unreachable), now=now)
        report.unreachable = str(unreachable)


def _read_side(
    snapshot: engine.Snapshot,
    plan: engine.Plan,
    refresh: Refresh,
    cluster: Cluster,
    *,
    now: datetime,
    report: CycleReport,
    read_side: bool,
    forecast_after: bool,
) -> None:
    """What comes after the cluster's creates and deletes, which are not held up by it: the
    waiting jobs' reasons, positions and estimates, the queues' estimates, the catalog's
    numbers and the operations history (and the node pools' requests)."""
    if forecast_after:
        with report.step("plan"):
            planning = time.monotonic()
            # the same snapshot: the same admissions, and the waiting jobs' reasons and starts
            snapshot = with_default_probes(snapshot)
            plan = engine.plan(snapshot)
            refresh.cost += time.monotonic() - planning
    if snapshot.node_pools:
        warm_holds_sync(snapshot, now=now)
    if snapshot.node_pools and plan.scale_up is not None:
        with report.step("node pools"):
            try:
                pools_apply(cluster, snapshot, plan, now=now)
            except ClusterUnreachable as exc:
                cluster_unreachable(str(exc), now=now)
                report.unreachable = str(exc)
    if read_side:
        with report.step("reasons"):
            pending_reasons_store(plan, now=now, refresh=refresh)
            refresh_end(refresh)
            if refresh.full:
                queue_estimates_store(snapshot, plan, now=now)
    with report.step("history"):
        if read_side:
            queue_stats_refresh(now=now)
            history_record(snapshot, plan, now=now)
        waits_observe(snapshot, report.admitted, now=now)


def read_side_due(follow_up: Callable[[], bool] | None) -> bool:
    """Whether this cycle writes the read side: the new waiting jobs' reasons, the catalog's
    numbers and the operations history. Under churn cycles run back to back, as fast as pods
    end, and that writing was a fifth of each; so while another cycle is already asked for
    (``follow_up``), it runs at most once a ``READ_SIDE_EVERY``. The last cycle of a burst (no
    follow-up) always runs it, so what a page shows is never more than about that old, and a
    full refresh of the reasons always writes them. The admissions are the same either way."""
    due = lease_acquire(name=READ_SIDE_LEASE, holder=uuid.uuid4().hex, ttl=READ_SIDE_EVERY)
    return due or follow_up is None or not follow_up()


def cycle_record(cluster: Cluster, *, report: CycleReport, now: datetime) -> None:
    """The cycle's own numbers for /metrics: its duration (a histogram and the last one), when
    it ended, and the cluster API's failed requests by kind. A failure to record is logged,
    never raised over the cycle's own outcome."""
    if not report.ran:
        return
    try:
        for kind, count in sorted(cluster.errors_taken().items()):
            counter_add(CLUSTER_API_ERRORS, kind, count)
        histogram_observe(RECONCILE_CYCLE_SECONDS, report.seconds, bounds=CYCLE_BUCKETS)
        ClusterStatus.objects.get_or_create(pk=1)
        ClusterStatus.objects.filter(pk=1).update(
            last_cycle_at=now, last_cycle_seconds=report.seconds
        )
    except DatabaseError:
        logger.exception("could not record the reconcile cycle's metrics")


def waits_observe(snapshot: engine.Snapshot, admitted: list[int], *, now: datetime) -> None:
    """Each job this cycle admitted, its wait (admitted minus submitted) into its queue's
    wait histogram (one write per queue and bucket, however many it admitted)."""
    pending = {job.id: job for job in snapshot.pending}
    waits: dict[str, list[float]] = defaultdict(list)
    for job_id in admitted:
        job = pending.get(job_id)
        if job is not None:
            waits[job.queue].append(max((now - job.submitted_at).total_seconds(), 0.0))
    for queue, values in sorted(waits.items()):
        histogram_observe_many(QUEUE_WAIT_SECONDS, values, bounds=WAIT_BUCKETS, label=queue)


def cluster_unreachable(error: str, *, now: datetime) -> datetime:
    """Note the failure; returns since when the cluster has been unreachable."""
    status, _ = ClusterStatus.objects.get_or_create(pk=1)
    since = status.unreachable_since or now
    ClusterStatus.objects.filter(pk=1).update(
        reachable=False, unreachable_since=since, last_error=error[:2000]
    )
    logger.warning(
        "cluster unreachable since %s: %s",
        since.isoformat(),
        error,
        extra={"cluster_unreachable_since": since.isoformat(), "error": error},
    )
    return since


def cluster_reachable(*, now: datetime, unknown: list[str]) -> None:
    ClusterStatus.objects.update_or_create(
        pk=1,
        defaults={
            "reachable": True,
            "unreachable_since": None,
            "last_error": "",
            "last_success_at": now,
            "unknown_jobs": unknown,
        },
    )


# UIDs of the portal's Kubernetes Jobs this process found a job in the database for. A Job
# that finished stays in the cluster for an hour; looking thousands of them up again every
# cycle cost more than the rest of this check under churn. A UID is never reused (kept to the
# Jobs the cluster still has).
_KNOWN_JOB_UIDS: set[str] = set()


def unknown_jobs(view: ClusterView) -> list[str]:
    """Jobs that carry the portal's labels but match no job in the database: reported (log and
    admin), never deleted automatically, since something the portal does not know made them."""
    # Most of the cluster's portal Jobs belong to jobs holding pods: read those ids through the
    # state index, and look up only the rest one by one in a small IN list.
    holding = set(
        Job.objects.filter(Q(state__in=K8S_JOB_STATES) | Q(terminating=True)).values_list(
            "pk", flat=True
        )
    )
    uids = {job_id: raw["metadata"].get("uid", "") for job_id, raw in view.jobs.items()}
    _KNOWN_JOB_UIDS.intersection_update(uids.values())
    rest = [
        job_id
        for job_id in view.jobs
        if job_id not in holding and uids[job_id] not in _KNOWN_JOB_UIDS
    ]
    found = set(Job.objects.filter(pk__in=rest).values_list("pk", flat=True))
    _KNOWN_JOB_UIDS.update(uids[job_id] for job_id in found if uids[job_id])
    unknown = sorted(
        f"{raw['metadata'].get('namespace', '')}/{raw['metadata'].get('name', '')}"
        for job_id, raw in view.jobs.items()
        if job_id not in holding and job_id not in found and uids[job_id] not in _KNOWN_JOB_UIDS
    )
    for name in unknown:
        logger.warning(
            "Job %s has the portal's labels but no job in the database",
            name,
            extra={"cluster_object": f"jobs.batch/{name}"},
        )
    return unknown
