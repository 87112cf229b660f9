"""The usage pass: one usage interval per pod that held GPUs, opened and closed as the cluster
reports them."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from fractions import Fraction

from django.db import connection, transaction

from queues.cluster.pods import PodFacts
from queues.models import (
    Job,
    Node,
    SharingMode,
    UsageInterval,
)
from queues.reconcile.facts import ClusterView, CycleReport
from queues.reconcile.rows import update_from_rows

logger = logging.getLogger(__name__)


# UIDs of pods this process found with a closed usage interval in the database. A finished
# pod stays in the cluster as long as its Job (an hour after it ends); asking the database
# again every cycle whether thousands of them have an interval cost more than the rest of the
# pass under churn. A UID is never reused, and an interval is never deleted: what this set
# holds stays true for as long as the pod is there (it is kept to the pods still shown).
_RECORDED: set[str] = set()


def usage_sync(view: ClusterView, *, now: datetime, report: CycleReport) -> None:
    """Open an interval for every portal pod that started, close it when the pod ends or goes
    (at the end it reported, read from its last state when it went between two cycles)."""
    pods = {p.uid: p for p in view.pods if p.job_id is not None}
    # Every running pod has an open interval: read only what closing one needs.
    open_rows = UsageInterval.objects.only(
        "pod_uid", "pod_name", "job_id", "pod_deleted_at", "grace_seconds", "started_at"
    ).filter(ended_at__isnull=True)
    open_intervals = list(open_rows)
    known = {i.pod_uid for i in open_intervals}
    candidates = [*pods.values(), *view.gone.values()]
    # (kept to the pods the cluster still shows)
    _RECORDED.intersection_update(p.uid for p in candidates)
    started = [
        p
        # A pod that started, ended and went between two cycles held GPUs too.
        for p in candidates
        if p.node
        and p.devices
        and p.container.started_at
        and p.uid not in known
        and p.uid not in _RECORDED
    ]
    if started:
        # A pod whose interval already closed must not open a second one.
        closed = set(
            UsageInterval.objects.filter(pod_uid__in=[p.uid for p in started]).values_list(
                "pod_uid", flat=True
            )
        )
        _RECORDED.update(closed)
        known |= closed
        started = [p for p in started if p.uid not in known]
    jobs = Job.objects.select_related("team", "gpu_class").in_bulk({p.job_id for p in started})
    replicas = dict(Node.objects.values_list("name", "time_slice_replicas"))
    opened = []
    for p in started:
        job = jobs.get(p.job_id)
        if job is None or job.gpu_class is None or p.container.started_at is None:
            continue
        share = job.gpu_class.device_share(job.mig_profile, replicas.get(p.node, 1))
        opened.append(
            UsageInterval(
                job=job,
                pod_uid=p.uid,
                pod_name=p.name,
                team=job.team,
                cost_center=job.team.cost_center,
                gpu_class=job.gpu_class,
                node=p.node,
                devices=sum(p.devices.values()),
                share_numerator=share.numerator,
                share_denominator=share.denominator,
                sharing_mode=_sharing_mode(job, share),
                started_at=p.container.started_at,
                grace_seconds=p.grace_seconds,
            )
        )
    # Unique pod UIDs keep a crashed cycle's rerun from counting a pod twice.
    UsageInterval.objects.bulk_create(opened, ignore_conflicts=True)
    report.intervals_opened += len(opened)
    for interval in opened:
        logger.info(
            "job %s: usage of pod %s opened at %s",
            interval.job_id,
            interval.pod_name,
            interval.started_at.isoformat(),
            extra={
                "job_id": interval.job_id,
                "cluster_object": f"pods/{interval.job.team.namespace}/{interval.pod_name}",
                "pod_uid": interval.pod_uid,
            },
        )
    if opened:
        # A pod that started and ended since the last cycle is closed in this one.
        open_intervals += open_rows.filter(pod_uid__in=[i.pod_uid for i in opened])

    # One commit for every close (a commit each was most of this pass's time at hundreds of
    # pods ending between two cycles); each close is still conditional on the interval open.
    with transaction.atomic():
        _close(open_intervals, pods, view, now=now, report=report)


def _close(
    open_intervals: list[UsageInterval],
    pods: dict[str, PodFacts],
    view: ClusterView,
    *,
    now: datetime,
    report: CycleReport,
) -> None:
    # Closes are written together (one statement on PostgreSQL), each still conditional on
    # its interval being open.
    closing: dict[int, tuple[UsageInterval, datetime, bool, PodFacts | None]] = {}
    for interval in open_intervals:
        pod = pods.get(interval.pod_uid)
        went = view.gone.get(interval.pod_uid)
        if pod is not None and pod.container.finished_at:
            end, estimated = pod.container.finished_at, False
        elif pod is None and went is not None and went.container.finished_at:
            # Ended and deleted since the last cycle: its last state says when it ended.
            end, estimated = went.container.finished_at, False
        elif pod is not None and pod.phase in ("Succeeded", "Failed"):
            end, estimated = now, True
        elif pod is not None:
            if pod.terminating and interval.pod_deleted_at is None:
                UsageInterval.objects.filter(pk=interval.pk, pod_deleted_at__isnull=True).update(
                    pod_deleted_at=pod.deleted_at or now, grace_seconds=pod.grace_seconds
                )
            continue
        elif interval.pod_deleted_at is not None:
            end = min(now, interval.pod_deleted_at + timedelta(seconds=interval.grace_seconds))
            estimated = True
        else:
            end, estimated = now, True  # first seen gone
        closing[interval.pk] = (interval, max(end, interval.started_at), estimated, pod)
    if connection.vendor == "postgresql":
        closed = update_from_rows(
            UsageInterval,
            {
                pk: {"ended_at": end, "end_estimated": est}
                for pk, (_, end, est, _) in closing.items()
            },
            where={"ended_at": None},
        )
    else:
        closed = {
            pk
            for pk, (_, end, est, _) in closing.items()
            if UsageInterval.objects.filter(pk=pk, ended_at__isnull=True).update(
                ended_at=end, end_estimated=est
            )
        }
    report.intervals_closed += len(closed)
    for pk, (interval, end, estimated, pod) in closing.items():
        if pk in closed:
            logger.info(
                "job %s: usage of pod %s closed at %s%s",
                interval.job_id,
                interval.pod_name,
                end.isoformat(),
                " (estimated)" if estimated else "",
                extra={
                    "job_id": interval.job_id,
                    "cluster_object": f"pods/{pod.namespace}/{pod.name}"
                    if pod is not None
                    else f"pods/{interval.pod_name}",
                    "pod_uid": interval.pod_uid,
                },
            )


def _sharing_mode(job: Job, share: Fraction) -> SharingMode:
    """MIG slices, time-slice replicas or whole GPUs: recorded, since the share alone cannot
    tell a 1/7 MIG slice from one of seven replicas."""
    if share == 1:
        return SharingMode.EXCLUSIVE
    if (
        job.mig_profile
        and job.gpu_class is not None
        and job.mig_profile in job.gpu_class.mig_profiles
    ):
        return SharingMode.MIG
    return SharingMode.TIME_SLICED
