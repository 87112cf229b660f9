"""Acting on the engine's plan: store every pending job's reasons and estimates, admit and
preempt, and create or delete the Kubernetes Jobs."""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from portal.tokens import job_token
from queues import admission as engine
from queues.admission.reasons import span_text
from queues.cluster.adapter import Cluster, ClusterRejected
from queues.cluster.manifests import LaunchSpec, job_manifest, job_name
from queues.models import (
    GPU_HOLDING_STATES,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Queue,
    QueueEstimate,
    Team,
)
from queues.reconcile.jobs import TERMINATING_STATES, job_transition
from queues.reconcile.view import ClusterView, CycleReport

logger = logging.getLogger(__name__)

# Creates the cluster refuses (4xx) before the job ends failed with the API's message.
MAX_CREATE_REFUSALS = 3


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
    events: list[JobEvent] = []
    for job in current:
        status = statuses[job.pk]
        reasons = [r.to_dict() for r in status.reasons]
        quota_event = _quota_event(job, job.pending_reasons, reasons, now=now)
        if quota_event is not None:
            events.append(quota_event)
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
    JobEvent.objects.bulk_create(events)
    for job_id, admitted_reasons in plan.admitted_reasons:
        Job.objects.filter(pk=job_id, state=JobState.ADMITTED).update(
            pending_reasons=[r.to_dict() for r in admitted_reasons]
        )


def _quota_event(
    job: Job, before: list[dict[str, Any]], after: list[dict[str, Any]], *, now: datetime
) -> JobEvent | None:
    """A timeline entry when the binding reason turns ``QuotaExceeded`` or stops being it (while
    the job still waits): how long a team's jobs waited on quota is evidence for a quota request.
    """
    was = _binding_quota(before)
    becomes = _binding_quota(after)
    if becomes is not None and (was is None or was["gpu_class"] != becomes["gpu_class"]):
        return JobEvent(
            job=job,
            at=now,
            kind=EventKind.QUOTA_HELD,
            message=after[0].get("message", ""),
            details={"gpu_class": becomes["gpu_class"], "requested": becomes.get("requested")},
        )
    if was is not None and becomes is None:
        code = after[0].get("code", "") if after else ""
        return JobEvent(
            job=job, at=now, kind=EventKind.QUOTA_RELEASED, message=f"now waiting on {code}"
        )
    return None


def quota_bound_classes(reasons: list[dict[str, Any]]) -> list[str]:
    """The GPU classes whose quota holds a job back, by its stored reasons: ``QuotaExceeded``'s
    class, or every class of a job that can never fit for want of quota (``NeverFits`` where no
    class allows enough). Quota requests and the admin's grid count from this one rule."""
    if not reasons:
        return []
    details = reasons[0].get("details") or {}
    code = reasons[0].get("code")
    if code == engine.ReasonCode.QUOTA_EXCEEDED:
        return [details["gpu_class"]] if details.get("gpu_class") else []
    most = details.get("most_entitled") or {}
    if code == engine.ReasonCode.NEVER_FITS and most and len(most) == len(details["gpu_classes"]):
        return sorted(most, key=lambda c: (-most[c], c))  # the quota closest to enough first
    return []


def _binding_quota(reasons: list[dict[str, Any]]) -> dict[str, Any] | None:
    classes = quota_bound_classes(reasons)
    if not classes:
        return None
    details = reasons[0].get("details") or {}
    requested = details.get("requested")
    if isinstance(requested, dict):
        requested = requested.get(classes[0])
    return {"gpu_class": classes[0], "requested": requested}


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
            kind=EventKind.ADMITTED,
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
        if job is None or job.state not in GPU_HOLDING_STATES:
            continue
        if job_transition(
            job,
            to=JobState.PREEMPTED,
            kind=EventKind.PREEMPTED,
            now=now,
            message=f"{preemption.reason}; its pods get {span_text(preemption.grace_period)} to "
            f"stop, about {int(preemption.lost_work.total_seconds() // 60)} min of work lost "
            "since its last checkpoint",
            details=preemption.to_dict(),
            terminating=True,
            preempted_for_id=preemption.for_job,
        ):
            report.preempted.append(job.pk)
    plan_store_reasons(plan, now=now)


def _mig_profile(job: Job) -> str:
    return job.mig_profile or job.capability_class.mig_profile


def with_default_probes(snapshot: engine.Snapshot) -> engine.Snapshot:
    """Add one probe per queue and team that may use it: the queue's default job, whose
    estimated start is the queue's published expected wait for that team."""
    probes: list[engine.PendingJob] = []
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


def cluster_apply(
    cluster: Cluster, view: ClusterView, *, now: datetime, report: CycleReport
) -> None:
    """Create the Jobs of admitted jobs, delete those of jobs that are ending. A job admitted by
    preemption waits until its victims' pods are gone: their GPUs are its, but not free yet."""
    to_create = (
        Job.objects.filter(state=JobState.ADMITTED, k8s_job_name="")
        .select_related("team", "queue", "gpu_class")
        .order_by("id")
    )
    waiting = _waiting_for_victims([job.pk for job in to_create])
    for job in to_create:
        if job.pk in waiting:
            _note_waiting_for_victims(job, waiting[job.pk])
            continue
        manifest = job_manifest(launch_spec(job))
        try:
            cluster.ensure_namespace(job.team.namespace)
            created = cluster.create_job(manifest)
        except ClusterRejected as exc:
            _create_refused(job, exc, now=now, report=report)
            continue
        report.jobs_created += int(created)
        name = manifest["metadata"]["name"]
        logger.info(
            "job %s: Kubernetes Job %s/%s %s",
            job.pk,
            job.team.namespace,
            name,
            "created" if created else "already existed",
            extra={"job_id": job.pk, "cluster_object": f"jobs.batch/{job.team.namespace}/{name}"},
        )
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED, k8s_job_name="").update(
            k8s_job_name=manifest["metadata"]["name"]
        )
    ending = Job.objects.filter(state__in=TERMINATING_STATES, terminating=True).select_related(
        "team", "queue"
    )
    pods_of = view.pods_of()
    for job in ending:
        if job.pk in view.jobs:
            deleted = cluster.delete_job(job.team.namespace, job_name(job.pk))
            report.jobs_deleted += int(deleted)
            name = f"{job.team.namespace}/{job_name(job.pk)}"
            logger.info(
                "job %s: Kubernetes Job %s %s",
                job.pk,
                name,
                "deleted" if deleted else "already gone",
                extra={"job_id": job.pk, "cluster_object": f"jobs.batch/{name}"},
            )
            continue
        # The Job is gone but its pods run on: deleted without cascading (kubectl's default for
        # a batch/v1 Job is to orphan them). They hold GPUs until they stop: stop them.
        grace = int(job.queue.termination_grace.total_seconds())
        for pod in pods_of.get(job.pk, []):
            if pod.deleted_at is None:
                report.orphans_deleted += int(
                    cluster.delete_pod(pod.namespace, pod.name, grace_seconds=grace)
                )
                logger.info(
                    "job %s: orphaned pod %s/%s deleted",
                    job.pk,
                    pod.namespace,
                    pod.name,
                    extra={"job_id": job.pk, "cluster_object": f"pods/{pod.namespace}/{pod.name}"},
                )


def _waiting_for_victims(job_ids: list[int]) -> dict[int, list[Job]]:
    """Of the admitted jobs ``job_ids``, those with a preempted job whose pods still stop."""
    waiting: dict[int, list[Job]] = {}
    for victim in Job.objects.filter(preempted_for_id__in=job_ids, terminating=True).select_related(
        "queue"
    ):
        assert victim.preempted_for_id is not None
        waiting.setdefault(victim.preempted_for_id, []).append(victim)
    return waiting


def _note_waiting_for_victims(job: Job, victims: list[Job]) -> None:
    names = ", ".join(str(v.pk) for v in victims)
    grace = max(v.queue.termination_grace for v in victims)
    reason = engine.PendingReason(
        engine.ReasonCode.INSUFFICIENT_CAPACITY,
        f"admitted by preempting job{'s' if len(victims) > 1 else ''} {names}: waiting for "
        f"their pods to stop (they get {span_text(grace)})",
        {"preempted_jobs": [v.pk for v in victims], "grace_seconds": int(grace.total_seconds())},
        "nothing to do: it starts as soon as they are gone",
    )
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        pending_reasons=[reason.to_dict()]
    )


def launch_spec(job: Job) -> LaunchSpec:
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
        grace_period=job.queue.termination_grace,
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
            kind=EventKind.CLUSTER_REFUSED,
            message=f"the cluster refused the Job ({exc.status}): {exc.message}; will retry",
        )
        return
    if job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        now=now,
        message=f"the cluster refused the Job {refusals} times: {exc.message}",
        failure_reason=f"cluster refused: {exc.message}"[:300],
        cluster_failures=refusals,
        finished_at=now,
    ):
        report.transitions["admitted→failed"] += 1
