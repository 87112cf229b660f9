"""One reconcile cycle: cluster → mirror → snapshot → engine → plan → database → cluster.

    sync nodes and pods → move job states from what the cluster reports → open and close usage
    intervals → build the snapshot → plan → store admissions, preemptions, reasons and
    estimates → create and delete Kubernetes Jobs → note the cluster's health.

Crash-safe by construction, not by luck: every job state change is a conditional UPDATE on the
state it leaves; Job names are derived from job ids and a create that finds its own Job is
success; a usage interval is keyed by its pod's UID and opened or closed by conditional writes.
Killing the process anywhere and running the next cycle loses nothing and does nothing twice.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from queues import admission as engine
from queues.cluster.adapter import Cluster, ClusterRejected, ClusterUnreachable
from queues.cluster.manifests import LaunchSpec, job_manifest, job_name
from queues.cluster.mirror import ClusterMirror
from queues.cluster.nodes import Conventions, NodeFacts, node_facts
from queues.cluster.pods import PodFacts, devices_held, parse_time, pod_facts
from queues.job_tokens import job_token
from queues.models import (
    ClusterStatus,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Node,
    PreemptionClass,
    Queue,
    QueueEstimate,
    Team,
    UsageInterval,
)
from queues.services import lease_acquire, lease_release, queue_stats_refresh
from queues.snapshot import snapshot_build

logger = logging.getLogger(__name__)

LEASE = "reconcile"
LEASE_TTL = timedelta(minutes=2)
# An admitted job whose pods the cluster cannot all start within this long is rolled back to
# pending (the scheduler's message is kept in its history).
START_TIMEOUT = timedelta(minutes=5)
# A rolled-back job is not admitted again before a back-off that doubles with each roll-back in
# a row (1, 2, 4 … minutes, at most an hour): the engine does not model everything the cluster
# checks (CPU, memory), and a job it cannot place would otherwise be admitted, stuck and rolled
# back over and over, holding GPUs others could use. A start resets it.
ROLLBACK_BACKOFF = timedelta(minutes=1)
MAX_ROLLBACK_BACKOFF = timedelta(hours=1)
# Creates the cluster refuses (4xx) before the job ends failed with the API's message.
MAX_CREATE_REFUSALS = 3
IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
TERMINATING_STATES = (JobState.PREEMPTED, JobState.CANCELLED, JobState.FAILED)


@dataclass
class CycleReport:
    """What one cycle did (for the command's output, the logs, the benchmark and the tests)."""

    ran: bool = True
    unreachable: str = ""
    transitions: Counter[str] = field(default_factory=Counter)
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    jobs_created: int = 0
    jobs_deleted: int = 0
    intervals_opened: int = 0
    intervals_closed: int = 0
    api_calls: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        if not self.ran:
            return "another reconcile holds the lease; nothing done"
        moves = ", ".join(f"{k} {v}" for k, v in sorted(self.transitions.items())) or "none"
        text = (
            f"admitted {len(self.admitted)}, preempted {len(self.preempted)}, "
            f"Jobs created {self.jobs_created}, deleted {self.jobs_deleted}, "
            f"usage opened {self.intervals_opened}, closed {self.intervals_closed}; "
            f"state changes: {moves}; {self.api_calls} API calls in {self.seconds:.2f} s"
        )
        return f"cluster unreachable ({self.unreachable}); " + text if self.unreachable else text


@dataclass
class ClusterView:
    """What the cluster said at the start of a cycle."""

    nodes: list[NodeFacts]
    pods: list[PodFacts]  # bound pods of anyone, and the portal's unbound ones
    jobs: dict[int, dict[str, Any]]  # the portal's Kubernetes Jobs by portal job id

    def pods_of(self) -> dict[int, list[PodFacts]]:
        grouped: dict[int, list[PodFacts]] = defaultdict(list)
        for pod in self.pods:
            if pod.job_id is not None:
                grouped[pod.job_id].append(pod)
        return grouped


def conventions() -> Conventions:
    return Conventions(
        rack_label=settings.CLUSTER_RACK_LABEL,
        network_domain_label=settings.CLUSTER_NETWORK_DOMAIN_LABEL,
    )


def read_cluster(cluster: Cluster, mirror: ClusterMirror | None = None) -> ClusterView:
    """What the cluster has: from the watch-fed ``mirror`` (no API call), or else by listing
    (four calls, however many jobs there are). A mirror that is failing raises
    ``ClusterUnreachable`` with its error."""
    if mirror is not None:
        problem = mirror.error()
        if problem:
            raise ClusterUnreachable(problem)
        raw_nodes = mirror.items("nodes")
        all_pods = mirror.facts("pods", pod_facts)  # only pods that changed are read again
        raw_jobs = mirror.items("jobs")
    else:
        raw_nodes = cluster.list_nodes().items
        raw_pods = cluster.list_pods().items + cluster.list_portal_pods().items
        all_pods = [pod_facts(raw) for raw in raw_pods]
        raw_jobs = cluster.list_portal_jobs().items
    nodes = [node_facts(n, conventions()) for n in raw_nodes]
    seen: dict[str, PodFacts] = {}
    for pod in all_pods:
        if pod.node or pod.job_id is not None:
            seen[pod.uid] = pod
    jobs: dict[int, dict[str, Any]] = {}
    for raw in raw_jobs:
        label = (raw.get("metadata", {}).get("labels") or {}).get("gpuportal.io/job-id", "")
        if label.isdigit():
            jobs[int(label)] = raw
    return ClusterView(nodes=nodes, pods=list(seen.values()), jobs=jobs)


# --- The cycle -----------------------------------------------------------------------------------


def reconcile_cycle(
    *,
    cluster: Cluster,
    now: datetime | None = None,
    holder: str = "reconcile",
    mirror: ClusterMirror | None = None,
) -> CycleReport:
    """Run one cycle if no other holds the lease. ``now`` defaults to the wall clock (tests
    pass the simulated cluster's); with a ``mirror`` the cycle reads the watch-fed copy instead
    of listing."""
    started = time.monotonic()
    report = CycleReport()
    if not lease_acquire(name=LEASE, holder=holder, ttl=LEASE_TTL):
        report.ran = False
        return report
    calls_before = cluster.calls
    try:
        now = now or timezone.now()
        try:
            view = read_cluster(cluster, mirror)
        except (ClusterUnreachable, ClusterRejected) as exc:
            since = cluster_unreachable(str(exc), now=now)
            report.unreachable = str(exc)
            plan = engine.plan(snapshot_build(now=now, cluster_unreachable_since=since))
            plan_store_reasons(plan, now=now)
            return report
        nodes_sync(view, now=now)
        unknown = unknown_jobs(view)
        jobs_sync(view, now=now, report=report)
        usage_sync(view, now=now, report=report)
        snapshot = with_default_probes(snapshot_build(now=now))
        plan = engine.plan(snapshot)
        plan_apply(plan, now=now, report=report)
        queue_estimates_store(snapshot, plan, now=now)
        try:
            cluster_apply(cluster, view, now=now, report=report)
        except ClusterUnreachable as exc:
            cluster_unreachable(str(exc), now=now)
            report.unreachable = str(exc)
        else:
            cluster_reachable(now=now, unknown=unknown)
        # The catalog's numbers last: they are for reading, the cluster's creates and deletes
        # are not held up by them.
        queue_stats_refresh(now=now)
        return report
    finally:
        report.api_calls = cluster.calls - calls_before
        report.seconds = time.monotonic() - started
        lease_release(name=LEASE, holder=holder)


def cluster_unreachable(error: str, *, now: datetime) -> datetime:
    """Note the failure; returns since when the cluster has been unreachable."""
    status, _ = ClusterStatus.objects.get_or_create(pk=1)
    since = status.unreachable_since or now
    ClusterStatus.objects.filter(pk=1).update(
        reachable=False, unreachable_since=since, last_error=error[:2000]
    )
    logger.warning("cluster unreachable since %s: %s", since.isoformat(), error)
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


def unknown_jobs(view: ClusterView) -> list[str]:
    """Jobs that carry the portal's labels but match no job in the database: reported (log and
    admin), never deleted automatically, since something the portal does not know made them."""
    # Most of the cluster's portal Jobs belong to jobs holding pods: read those ids through the
    # state index, and look up only the rest one by one in a small IN list.
    holding = set(
        Job.objects.filter(
            Q(state__in=(JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTED))
            | Q(terminating=True)
        ).values_list("pk", flat=True)
    )
    rest = [job_id for job_id in view.jobs if job_id not in holding]
    known = holding | set(Job.objects.filter(pk__in=rest).values_list("pk", flat=True))
    unknown = sorted(
        f"{raw['metadata'].get('namespace', '')}/{raw['metadata'].get('name', '')}"
        for job_id, raw in view.jobs.items()
        if job_id not in known
    )
    for name in unknown:
        logger.warning("Job %s has the portal's labels but no job in the database", name)
    return unknown


# --- Nodes ---------------------------------------------------------------------------------------


def nodes_sync(view: ClusterView, *, now: datetime) -> None:
    """Mirror every node; a node the cluster no longer reports stays, marked unhealthy."""
    classes = {g.product: g for g in GpuClass.objects.all()}
    use = devices_held(view.pods)
    existing = {n.name: n for n in Node.objects.all()}
    changed: list[Node] = []
    created: list[Node] = []
    seen: list[int] = []
    fields = [
        "gpu_class",
        "product",
        "gpu_count",
        "mig_layout",
        "time_slice_replicas",
        "rack",
        "network_domain",
        "labels",
        "taints",
        "healthy",
        "health_reason",
        "maintenance",
        "maintenance_reason",
        "maintenance_until",
        "gpus_used_outside",
        "outside_devices",
        "cpu_millicores",
        "memory_mib",
    ]
    for facts in view.nodes:
        outside = dict(sorted(use[facts.name].outside.items())) if facts.name in use else {}
        gpu_class = classes.get(facts.product)
        values = {
            # The id, not the object: comparing objects would load every node's class.
            "gpu_class_id": gpu_class.pk if gpu_class is not None else None,
            "product": facts.product,
            "gpu_count": facts.gpu_count,
            "mig_layout": facts.mig_layout,
            "time_slice_replicas": facts.time_slice_replicas,
            "rack": facts.rack,
            "network_domain": facts.network_domain,
            "labels": facts.labels,
            "taints": facts.taints,
            "healthy": facts.healthy,
            "health_reason": facts.health_reason[:300],
            "maintenance": facts.maintenance,
            "maintenance_reason": facts.maintenance_reason[:300],
            "maintenance_until": facts.maintenance_until,
            "gpus_used_outside": _outside_gpu_eq(outside, facts, gpu_class),
            "outside_devices": outside,
            "cpu_millicores": facts.cpu_millicores,
            "memory_mib": facts.memory_mib,
            "last_seen_at": now,
        }
        node = existing.pop(facts.name, None)
        if node is None:
            created.append(Node(name=facts.name, **values))
            continue
        seen.append(node.pk)
        values.pop("last_seen_at")
        if any(getattr(node, key) != value for key, value in values.items()):
            for key, value in values.items():
                setattr(node, key, value)
            changed.append(node)
    for gone in existing.values():
        if gone.healthy or gone.health_reason != "not reported by the cluster":
            gone.healthy = False
            gone.health_reason = "not reported by the cluster"
            changed.append(gone)
    Node.objects.bulk_create(created)
    # Only what changed is written; most cycles change no node at all.
    Node.objects.bulk_update(changed, fields, batch_size=500)
    Node.objects.filter(pk__in=seen).update(last_seen_at=now)


def _outside_gpu_eq(
    outside: dict[str, int], facts: NodeFacts, gpu_class: GpuClass | None
) -> Decimal:
    total = Fraction(outside.get("gpu", 0), facts.time_slice_replicas)
    for profile, count in outside.items():
        if profile != "gpu" and gpu_class is not None and profile in gpu_class.mig_profiles:
            total += count * gpu_class.mig_share(profile)
    return (Decimal(total.numerator) / Decimal(total.denominator)).quantize(Decimal("0.001"))


# --- Jobs ----------------------------------------------------------------------------------------


def job_transition(
    job: Job,
    *,
    to: str,
    kind: str,
    message: str,
    now: datetime,
    details: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """Move ``job`` from the state it was read in to ``to``, once: a conditional UPDATE, and the
    timeline event only if this call made the change."""
    # savepoint=False: inside jobs_sync's transaction a savepoint per job would cost two more
    # round trips each, and nothing here is caught to roll back to.
    with transaction.atomic(savepoint=False):
        moved = Job.objects.filter(pk=job.pk, state=job.state).update(state=to, **fields)
        if moved:
            JobEvent.objects.create(
                job_id=job.pk, at=now, kind=kind, message=message, details=details or {}
            )
    if moved:
        job.state = to
    return bool(moved)


def rollback_backoff(rollbacks: int) -> timedelta:
    """How long a job rolled back ``rollbacks`` times in a row waits before it may be admitted."""
    return min(ROLLBACK_BACKOFF * 2 ** min(rollbacks - 1, 16), MAX_ROLLBACK_BACKOFF)


def minutes_text(span: timedelta) -> str:
    minutes = int(span.total_seconds() // 60)
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


def _requeue_fields(job: Job) -> dict[str, Any]:
    return {
        "attempts": job.attempts + 1,
        "gpu_class": None,
        "nodes": [],
        "capacity_kind": "",
        "reservation": None,
        "k8s_job_name": "",
        "admitted_at": None,
        "started_at": None,
        "terminating": False,
        "pending_reasons": [],
    }


def jobs_sync(view: ClusterView, *, now: datetime, report: CycleReport) -> None:
    """Move every job the cluster holds (or held) to the state the cluster reports."""
    pods_of = view.pods_of()
    # Only the fields the passes below read: thousands of running jobs are looked at every
    # cycle, and their JSON fields (environment, command, reasons) cost the most to load.
    jobs = Job.objects.filter(
        Q(state__in=(JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTED))
        | Q(state__in=TERMINATING_STATES, terminating=True)
    ).only(
        "state",
        "terminating",
        "k8s_job_name",
        "pods",
        "image",
        "admitted_at",
        "started_at",
        "runtime_limit",
        "attempts",
        "rollbacks",
        "not_before",
    )
    # One transaction for the whole pass: a cycle that moves hundreds of jobs commits once, and
    # if the worker dies mid-pass the next cycle makes the same moves from the same cluster state.
    with transaction.atomic():
        for job in jobs:
            pods = pods_of.get(job.pk, [])
            k8s = view.jobs.get(job.pk)
            if job.terminating or job.state == JobState.PREEMPTED:
                _sync_terminating(job, pods, k8s, now=now, report=report)
            elif job.state == JobState.ADMITTED:
                _sync_admitted(job, pods, k8s, now=now, report=report)
            elif job.state == JobState.RUNNING:
                _sync_running(job, pods, k8s, now=now, report=report)


def _sync_terminating(
    job: Job, pods: list[PodFacts], k8s: dict | None, *, now: datetime, report: CycleReport
) -> None:
    if pods or k8s is not None:
        return  # its GPUs are held until the Job and its pods are gone
    if job.state == JobState.PREEMPTED:
        message = f"pods gone; back in the queue (attempt {job.attempts + 2})"
        held: dict[str, Any] = {}
        if job.not_before is not None:  # rolled back, and not started since
            held["not_before"] = now + rollback_backoff(job.rollbacks)
            message += f"; not admitted before {held['not_before'].isoformat(timespec='seconds')}"
        if job_transition(
            job,
            to=JobState.PENDING,
            kind="requeued",
            now=now,
            message=message,
            **_requeue_fields(job),
            **held,
        ):
            report.transitions["preempted→pending"] += 1
    else:
        Job.objects.filter(pk=job.pk, terminating=True).update(terminating=False)


def _sync_admitted(
    job: Job, pods: list[PodFacts], k8s: dict | None, *, now: datetime, report: CycleReport
) -> None:
    if not job.k8s_job_name:
        return  # not created yet: cluster_apply creates it
    if k8s is None:
        _deleted_outside(job, pods, now=now, report=report)
        return
    pulls = [p for p in pods if p.container.reason in IMAGE_PULL_FAILURES]
    if pulls:
        pod = pulls[0]
        if job_transition(
            job,
            to=JobState.FAILED,
            kind="failed",
            now=now,
            message=f"image {job.image} could not be pulled: "
            f"{pod.container.message or pod.container.reason}",
            failure_reason=f"{pod.container.reason}: {pod.container.message}"[:300],
            finished_at=now,
            terminating=True,
        ):
            report.transitions["admitted→failed"] += 1
        return
    started = [p for p in pods if p.container.started_at is not None]
    if len(started) >= job.pods:
        start = max(p.container.started_at for p in started)  # the gang runs once all ranks do
        if job_transition(
            job,
            to=JobState.RUNNING,
            kind="started",
            now=now,
            message=f"{job.pods} pod(s) running on {', '.join(sorted({p.node for p in started}))}",
            started_at=start,
            pending_reasons=[],
            rollbacks=0,
            not_before=None,
        ):
            report.transitions["admitted→running"] += 1
        return
    if _finished(k8s):
        _sync_running(job, pods, k8s, now=now, report=report)
        return
    stuck = next((p.unschedulable_message for p in pods if p.unschedulable_message), "")
    if stuck:
        reason = engine.PendingReason(
            engine.ReasonCode.CLUSTER_UNSCHEDULABLE,
            f"admitted, but the cluster's scheduler cannot place a pod: {stuck}",
            {"scheduler_message": stuck},
            "the portal rolls the job back to the queue if this lasts "
            f"{minutes_text(START_TIMEOUT)}",
        )
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
            pending_reasons=[reason.to_dict()]
        )
    if job.admitted_at and now - job.admitted_at > START_TIMEOUT:
        rollbacks = job.rollbacks + 1
        backoff = rollback_backoff(rollbacks)
        # Marks the job rolled back; the requeue, once its pods are gone, holds it back from then.
        not_before = now + backoff
        message = (
            f"only {len(started)} of {job.pods} pods started within "
            f"{minutes_text(START_TIMEOUT)}"
            + (f"; the scheduler said: {stuck}" if stuck else "")
            + f"; back in the queue once its pods are gone, held back {minutes_text(backoff)}"
        )
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind=JobEvent.ROLLED_BACK,
            now=now,
            message=message,
            details={
                "scheduler_message": stuck,
                "started_pods": len(started),
                "rollbacks": rollbacks,
                "backoff_seconds": int(backoff.total_seconds()),
            },
            terminating=True,
            rollbacks=rollbacks,
            not_before=not_before,
        ):
            report.transitions["admitted→rolled back"] += 1


def _finished(k8s: dict | None) -> str:
    """``Complete`` or ``Failed`` when the Kubernetes Job says so (with its reason), else ""."""
    for condition in (k8s or {}).get("status", {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return (
                condition["type"]
                if condition["type"] == "Complete"
                else f"Failed:{condition.get('reason', '')}"
            )
    return ""


def _sync_running(
    job: Job, pods: list[PodFacts], k8s: dict | None, *, now: datetime, report: CycleReport
) -> None:
    before = job.state
    if k8s is None:
        _deleted_outside(job, pods, now=now, report=report)
        return
    outcome = _finished(k8s)
    finished = [p.container.finished_at for p in pods if p.container.finished_at]
    completion = parse_time((k8s.get("status") or {}).get("completionTime"))
    end = completion or (max(finished) if finished else now)
    if outcome == "Complete":
        if job_transition(
            job,
            to=JobState.SUCCEEDED,
            kind="succeeded",
            now=now,
            message="all pods completed",
            finished_at=end,
            exit_code=0,
        ):
            report.transitions[f"{before}→succeeded"] += 1
        return
    if outcome.startswith("Failed"):
        cluster_reason = outcome.split(":", 1)[1]
        bad = next((p for p in pods if p.container.exit_code not in (None, 0)), None)
        if cluster_reason == "DeadlineExceeded":
            reason = "TimedOut"
            message = f"ran past its runtime limit of {job.runtime_limit}"
        elif bad is not None and bad.container.reason == "OOMKilled":
            reason = "OOMKilled"
            message = f"pod {bad.name} ran out of memory (exit code {bad.container.exit_code})"
        elif bad is not None:
            reason = bad.container.reason or "Error"
            message = f"pod {bad.name} exited with code {bad.container.exit_code}"
        else:
            reason = cluster_reason or "Failed"
            message = f"the cluster marked the Job failed ({cluster_reason})"
        if job_transition(
            job,
            to=JobState.FAILED,
            kind="failed",
            now=now,
            message=message,
            failure_reason=reason,
            exit_code=bad.container.exit_code if bad else None,
            finished_at=max(finished) if finished else now,
        ):
            report.transitions[f"{before}→failed"] += 1
        return
    overdue = job.started_at is not None and now > job.started_at + job.runtime_limit
    if (
        job.state == JobState.RUNNING
        and overdue
        and job_transition(
            job,
            to=JobState.FAILED,
            kind="failed",
            now=now,
            message=f"ran past its runtime limit of {job.runtime_limit}",
            failure_reason="TimedOut",
            finished_at=now,
            terminating=True,
        )
    ):
        report.transitions["running→failed"] += 1


def _deleted_outside(job: Job, pods: list[PodFacts], *, now: datetime, report: CycleReport) -> None:
    if job_transition(
        job,
        to=JobState.FAILED,
        kind="failed",
        now=now,
        message="its Kubernetes Job was deleted outside the portal",
        failure_reason="deleted outside the portal",
        finished_at=now,
        terminating=bool(pods),
    ):
        report.transitions["deleted outside"] += 1


# --- Usage intervals -----------------------------------------------------------------------------


def usage_sync(view: ClusterView, *, now: datetime, report: CycleReport) -> None:
    """Open an interval for every portal pod that started, close it when the pod ends or goes."""
    pods = {p.uid: p for p in view.pods if p.job_id is not None}
    # Every running pod has an open interval: read only what closing one needs.
    open_rows = UsageInterval.objects.only(
        "pod_uid", "pod_deleted_at", "grace_seconds", "started_at"
    ).filter(ended_at__isnull=True)
    open_intervals = list(open_rows)
    known = {i.pod_uid for i in open_intervals}
    started = [
        p
        for p in pods.values()
        if p.node and p.devices and p.container.started_at and p.uid not in known
    ]
    if started:
        # A pod whose interval already closed must not open a second one.
        known |= set(
            UsageInterval.objects.filter(pod_uid__in=[p.uid for p in started]).values_list(
                "pod_uid", flat=True
            )
        )
        started = [p for p in started if p.uid not in known]
    jobs = Job.objects.select_related("team", "gpu_class").in_bulk({p.job_id for p in started})
    replicas = dict(Node.objects.values_list("name", "time_slice_replicas"))
    opened = [
        UsageInterval(
            job=jobs[p.job_id],
            pod_uid=p.uid,
            pod_name=p.name,
            team=jobs[p.job_id].team,
            cost_center=jobs[p.job_id].team.cost_center,
            gpu_class=jobs[p.job_id].gpu_class,
            node=p.node,
            devices=sum(p.devices.values()),
            share_numerator=share.numerator,
            share_denominator=share.denominator,
            started_at=p.container.started_at,
            grace_seconds=p.grace_seconds,
        )
        for p in started
        if p.job_id in jobs and jobs[p.job_id].gpu_class is not None
        for share in [_share(p, jobs[p.job_id], replicas.get(p.node, 1))]
    ]
    # Unique pod UIDs keep a crashed cycle's rerun from counting a pod twice.
    UsageInterval.objects.bulk_create(opened, ignore_conflicts=True)
    report.intervals_opened += len(opened)
    if opened:
        # A pod that started and ended since the last cycle is closed in this one.
        open_intervals += open_rows.filter(pod_uid__in=[i.pod_uid for i in opened])

    for interval in open_intervals:
        pod = pods.get(interval.pod_uid)
        if pod is not None and pod.container.finished_at:
            end, estimated = pod.container.finished_at, False
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
        closed = UsageInterval.objects.filter(pk=interval.pk, ended_at__isnull=True).update(
            ended_at=max(end, interval.started_at), end_estimated=estimated
        )
        report.intervals_closed += closed


def _share(pod: PodFacts, job: Job, replicas: int) -> Fraction:
    if (
        job.mig_profile
        and job.gpu_class is not None
        and job.mig_profile in job.gpu_class.mig_profiles
    ):
        return job.gpu_class.mig_share(job.mig_profile)
    return Fraction(1, replicas)


# --- Storing the plan ----------------------------------------------------------------------------


def plan_store_reasons(plan: engine.Plan, *, now: datetime) -> None:
    """Store every pending job's reasons, estimated start and position (changed rows only)."""
    statuses = {s.job_id: s for s in plan.pending}
    current = Job.objects.filter(pk__in=list(statuses), state=JobState.PENDING).only(
        "id",
        "pending_reasons",
        "estimated_start",
        "estimated_start_note",
        "position",
        "queue_length",
    )
    changed = []
    for job in current:
        status = statuses[job.pk]
        reasons = [r.to_dict() for r in status.reasons]
        estimate = status.estimated_start
        note = estimate.why_unknown
        if estimate.range_low and estimate.range_high:
            low, high = estimate.range_low.isoformat(), estimate.range_high.isoformat()
            note = f"from recent waits: {low} – {high}"
        values = (reasons, estimate.at, note[:300], status.position, status.queue_length)
        if values != (
            job.pending_reasons,
            job.estimated_start,
            job.estimated_start_note,
            job.position,
            job.queue_length,
        ):
            (
                job.pending_reasons,
                job.estimated_start,
                job.estimated_start_note,
                job.position,
                job.queue_length,
            ) = values
            changed.append(job)
    Job.objects.bulk_update(
        changed,
        ["pending_reasons", "estimated_start", "estimated_start_note", "position", "queue_length"],
        batch_size=500,
    )
    for job_id, reasons in plan.admitted_reasons:
        Job.objects.filter(pk=job_id, state=JobState.ADMITTED).update(
            pending_reasons=[r.to_dict() for r in reasons]
        )


def plan_apply(plan: engine.Plan, *, now: datetime, report: CycleReport) -> None:
    """Admissions and preemptions become state changes; reasons are stored for the rest."""
    jobs = Job.objects.select_related("capability_class").in_bulk(
        [a.job_id for a in plan.admissions] + [p.job_id for p in plan.preemptions]
    )
    classes = {g.name: g for g in GpuClass.objects.all()}
    for admission in plan.admissions:
        job = jobs.get(admission.job_id)
        if job is None or job.state != JobState.PENDING:
            continue
        if job_transition(
            job,
            to=JobState.ADMITTED,
            kind="admitted",
            now=now,
            message=f"admitted on {admission.gpu_class} ({admission.capacity.value}) on "
            f"{', '.join(sorted(set(admission.nodes)))}",
            details=admission.to_dict(),
            gpu_class=classes[admission.gpu_class],
            nodes=list(admission.nodes),
            capacity_kind=admission.capacity.value,
            reservation_id=admission.reservation_id,
            admitted_at=now,
            not_before=None,  # a roll-back sets it again; a preemption before start does not
            pending_reasons=[],
            position=None,
            queue_length=None,
            estimated_start=None,
            estimated_start_note="",
            mig_profile=_mig_profile(job),
        ):
            report.admitted.append(job.pk)
    for preemption in plan.preemptions:
        job = jobs.get(preemption.job_id)
        if job is None or job.state not in (JobState.ADMITTED, JobState.RUNNING):
            continue
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind="preempted",
            now=now,
            message=f"{preemption.reason}; {int(preemption.grace_period.total_seconds())} s to "
            f"wind down, about {int(preemption.lost_work.total_seconds() // 60)} min of work lost "
            "since its last checkpoint",
            details=preemption.to_dict(),
            terminating=True,
        ):
            report.preempted.append(job.pk)
    plan_store_reasons(plan, now=now)


def _mig_profile(job: Job) -> str:
    return job.mig_profile or job.capability_class.mig_profile


def with_default_probes(snapshot: engine.Snapshot) -> engine.Snapshot:
    """Add one probe per queue and team that may use it: the queue's default job, whose
    estimated start is the queue's published expected wait for that team."""
    probes = []
    for queue in snapshot.queues:
        for team in queue.teams:
            probe = engine.default_probe(
                queue,
                team,
                snapshot.now,
                len(probes) + 1,
                gpu_classes=snapshot.gpu_classes,
                capability_classes=snapshot.capability_classes,
            )
            if probe is not None:
                probes.append(probe)
    return dataclasses.replace(snapshot, probes=tuple(probes))


def queue_estimates_store(snapshot: engine.Snapshot, plan: engine.Plan, *, now: datetime) -> None:
    estimates = dict(plan.probe_estimates)
    queues = dict(Queue.objects.values_list("name", "pk"))
    teams = dict(Team.objects.values_list("name", "pk"))
    rows = [
        QueueEstimate(
            queue_id=queues[probe.queue],
            team_id=teams[probe.team],
            estimated_start=estimates[probe.id].at,
            note=estimates[probe.id].why_unknown[:300],
            computed_at=now,
        )
        for probe in snapshot.probes
        if probe.id in estimates and probe.queue in queues and probe.team in teams
    ]
    with transaction.atomic():
        QueueEstimate.objects.all().delete()
        QueueEstimate.objects.bulk_create(rows)


# --- Acting on the cluster -----------------------------------------------------------------------


def cluster_apply(
    cluster: Cluster, view: ClusterView, *, now: datetime, report: CycleReport
) -> None:
    """Create the Jobs of admitted jobs, delete those of jobs that are ending."""
    to_create = (
        Job.objects.filter(state=JobState.ADMITTED, k8s_job_name="")
        .select_related("team", "queue", "gpu_class")
        .order_by("id")
    )
    for job in to_create:
        manifest = job_manifest(launch_spec(job))
        try:
            cluster.ensure_namespace(job.team.namespace)
            created = cluster.create_job(manifest)
        except ClusterRejected as exc:
            _create_refused(job, exc, now=now, report=report)
            continue
        report.jobs_created += int(created)
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED, k8s_job_name="").update(
            k8s_job_name=manifest["metadata"]["name"]
        )
    ending = Job.objects.filter(state__in=TERMINATING_STATES, terminating=True).select_related(
        "team"
    )
    for job in ending:
        if job.pk in view.jobs:
            report.jobs_deleted += int(cluster.delete_job(job.team.namespace, job_name(job.pk)))


def launch_spec(job: Job) -> LaunchSpec:
    grace = (
        job.queue.grace_period if job.queue.preemption_class == PreemptionClass.GRACEFUL else None
    )
    return LaunchSpec(
        job_id=job.pk,
        namespace=job.team.namespace,
        team=job.team.name,
        queue=job.queue.name,
        image=job.image,
        command=list(job.command),
        args=list(job.args),
        env={str(k): str(v) for k, v in job.env.items()},
        nodes=list(job.nodes),
        devices_per_pod=job.gpus_per_pod,
        mig_profile=job.mig_profile,
        cpu_millicores=job.cpu_millicores_per_pod,
        memory_mib=job.memory_mib_per_pod,
        runtime_limit=job.runtime_limit,
        grace_period=grace or timedelta(seconds=30),
        job_token=job_token(job.pk),
        api_url=settings.PORTAL_URL,
        extra_pod_annotations=_sim_annotations(job),
    )


def _sim_annotations(job: Job) -> dict[str, str]:
    """Simulation-only annotations a job may carry in its environment (demo and tests)."""
    duration = job.env.get("SIM_DURATION_SECONDS")
    return {"sim.gpuportal.io/duration-seconds": str(duration)} if duration else {}


def _create_refused(job: Job, exc: ClusterRejected, *, now: datetime, report: CycleReport) -> None:
    refusals = job.cluster_failures + 1
    if refusals < MAX_CREATE_REFUSALS:
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(cluster_failures=refusals)
        JobEvent.objects.create(
            job_id=job.pk,
            at=now,
            kind="cluster refused",
            message=f"the cluster refused the Job ({exc.status}): {exc.message}; will retry",
        )
        return
    if job_transition(
        job,
        to=JobState.FAILED,
        kind="failed",
        now=now,
        message=f"the cluster refused the Job {refusals} times: {exc.message}",
        failure_reason=f"cluster refused: {exc.message}"[:300],
        cluster_failures=refusals,
        finished_at=now,
    ):
        report.transitions["admitted→failed"] += 1
