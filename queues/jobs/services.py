"""Every state change of the queues app. Services are keyword-only and named entity_action."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from portal.masking import holds_secret_values
from queues.cluster.secrets import env_json
from queues.jobs.requests import (
    REQUEST_FIELDS,
    JobRequest,
    RequestLookups,
    job_request_errors,
    pending_cap_errors,
    requests_prefetch,
)
from queues.models import (
    ACTIVE_JOB_STATES,
    K8S_JOB_STATES,
    EventKind,
    Job,
    JobEvent,
    JobState,
    Queue,
    SubmissionKey,
)
from queues.reconcile.tasks import request_reconcile

# --- Policy as code ------------------------------------------------------------------------------


# --- Leases --------------------------------------------------------------------------------------


# --- Jobs ----------------------------------------------------------------------------------------


class JobNotCancellable(Exception):
    """The job already finished (or was cancelled)."""


def job_cancel(*, job: Job, by: User) -> Job:
    """Cancel a pending, admitted, running or preempted job. One that holds or held pods shows
    ``terminating`` until the reconcile has deleted its Kubernetes Job and the pods are gone.
    Raises ``JobNotCancellable`` for a job that has already ended."""
    now = timezone.now()
    with transaction.atomic():
        # Lock the row: the reconcile may be moving it (pending → admitted) right now, and
        # whether pods must be waited for depends on the state it is really in.
        current = Job.objects.select_for_update().get(pk=job.pk)
        if current.state not in ACTIVE_JOB_STATES:
            raise JobNotCancellable(f"job {job.pk} is {current.state}")
        holds_pods = current.state in K8S_JOB_STATES
        Job.objects.filter(pk=job.pk).update(
            state=JobState.CANCELLED,
            terminating=holds_pods,
            finished_at=now,
            pending_reasons=[],
            position=None,
            estimated_start=None,
        )
        JobEvent.objects.create(
            job_id=job.pk,
            at=now,
            kind=EventKind.CANCELLED,
            message=f"cancelled by {by.get_username()}",
        )
        request_reconcile()
    job.refresh_from_db()
    return job


class JobRejected(Exception):
    """The submission breaks the queue's terms; ``errors`` maps each field to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def job_submit(*, request: JobRequest) -> Job:
    """Accept a job if it keeps its queue's terms; the job is committed before anything else
    happens, then a reconcile is requested. Raises ``JobRejected`` naming every field that
    breaks a term; nothing is stored then."""
    errors = job_request_errors(request)
    if errors:
        raise JobRejected(errors)
    with transaction.atomic():
        if over := _lock_and_check_caps([request]):
            raise JobRejected(over[0])
        return _jobs_store([request])[0]


# --- Submitting once: a repeat with the same key gets the first submission's jobs -------------

# How long a key is remembered: a script retries within minutes, a person goes Back within hours.
SUBMISSION_KEY_LIFETIME = timedelta(hours=24)


class SubmissionKeyReused(Exception):
    """The key came with a different request than the one it first stored."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"the key {key!r} was used for a different submission in the last "
            f"{int(SUBMISSION_KEY_LIFETIME.total_seconds() // 3600)} hours: send a new key "
            "for a new submission"
        )


@dataclass(frozen=True)
class Submitted:
    """What a keyed submission stored, or (``repeat``) what the key's first one stored."""

    jobs: list[Job]
    repeat: bool


def submission_fingerprint(requests: list[JobRequest]) -> str:
    """The same for the same request fields (names of teams, queues and classes; sizes; what
    runs), whoever's objects they are: what a key's repeat must match."""
    fields = [{name: getattr(r, name) for name in REQUEST_FIELDS} for r in requests]
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def job_submit_once(*, request: JobRequest, key: str) -> Submitted:
    """``job_submit``, or the job this owner's earlier submission with ``key`` stored (within
    ``SUBMISSION_KEY_LIFETIME``). Raises ``SubmissionKeyReused`` if that one differed."""
    return _submit_once([request], key=key, rejected=lambda errors: JobRejected(errors[0]))


def job_submit_batch_once(*, requests: list[JobRequest], key: str) -> Submitted:
    """``job_submit_batch`` with a key, as ``job_submit_once``."""
    return _submit_once(requests, key=key, rejected=BatchRejected)


def _submit_once(requests: list[JobRequest], *, key: str, rejected: Any) -> Submitted:
    owner = requests[0].owner
    fingerprint = submission_fingerprint(requests)
    if (first := _first_submission(owner, key, fingerprint)) is not None:
        return first  # the usual repeat: nothing to check again
    lookups = RequestLookups()
    requests_prefetch(requests, lookups)
    errors = {
        index: refused
        for index, request in enumerate(requests)
        if (refused := job_request_errors(request, lookups=lookups))
    }
    if errors:
        raise rejected(errors)
    with transaction.atomic():
        if over := _lock_and_check_caps(requests):
            raise rejected(over)
        # The owner's row is locked now: a repeat sent at the same moment waits here, then finds
        # what this one stored.
        if (first := _first_submission(owner, key, fingerprint)) is not None:
            return first
        now = timezone.now()
        SubmissionKey.objects.filter(
            owner=owner, created_at__lt=now - SUBMISSION_KEY_LIFETIME
        ).delete()
        jobs = _jobs_store(requests)
        SubmissionKey.objects.create(
            owner=owner,
            key=key,
            fingerprint=fingerprint,
            jobs=[job.pk for job in jobs],
            created_at=now,
        )
    return Submitted(jobs, repeat=False)


def _first_submission(owner: User, key: str, fingerprint: str) -> Submitted | None:
    since = timezone.now() - SUBMISSION_KEY_LIFETIME
    first = SubmissionKey.objects.filter(owner=owner, key=key, created_at__gte=since).first()
    if first is None:
        return None
    if first.fingerprint != fingerprint:
        raise SubmissionKeyReused(key)
    by_id = Job.objects.select_related("owner", "team", "queue", "capability_class").in_bulk(
        first.jobs
    )
    return Submitted([by_id[pk] for pk in first.jobs if pk in by_id], repeat=True)


class BatchRejected(Exception):
    """Some submissions of a batch break their queues' terms; ``errors`` maps the position of
    each refused one (from 0) to its errors by field."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]) -> None:
        super().__init__(f"{len(errors)} submissions refused (first: #{min(errors)})")
        self.errors = errors


def job_submit_batch(*, requests: list[JobRequest]) -> list[Job]:
    """Accept every job of a batch (a sweep, say) or none: each is checked against its queue's
    terms as ``job_submit`` checks one; then all are stored in one transaction and one
    reconcile is requested. Raises ``BatchRejected`` naming every refused submission."""
    lookups = RequestLookups()
    requests_prefetch(requests, lookups)
    errors = {}
    for index, request in enumerate(requests):
        if refused := job_request_errors(request, lookups=lookups):
            errors[index] = refused
    if errors:
        raise BatchRejected(errors)
    with transaction.atomic():
        if over := _lock_and_check_caps(requests):
            raise BatchRejected(over)
        return _jobs_store(requests)


def _lock_and_check_caps(requests: list[JobRequest]) -> dict[int, dict[str, list[str]]]:
    """Lock the owners' and queues' rows (in a fixed order, so two submissions never deadlock),
    then count pending jobs: concurrent submissions of one user or to one queue are counted one
    after the other, never both under the cap. Must run inside the storing transaction."""
    list(
        User.objects.select_for_update()
        .filter(pk__in={r.owner.pk for r in requests})
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    list(
        Queue.objects.select_for_update()
        .filter(pk__in={r.queue.pk for r in requests})
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return pending_cap_errors(requests)


def _jobs_store(requests: list[JobRequest]) -> list[Job]:
    """Store accepted submissions with their ``submitted`` events (one transaction), then ask
    for a reconcile once it commits."""
    now = timezone.now()
    jobs = [_job_row(r, now) for r in requests]
    with transaction.atomic():
        jobs = Job.objects.bulk_create(jobs)
        JobEvent.objects.bulk_create(
            JobEvent(
                job=job,
                at=now,
                kind=EventKind.SUBMITTED,
                message=f"submitted to queue {job.queue.name}",
            )
            for job in jobs
        )
        request_reconcile()
    return jobs


def _job_row(request: JobRequest, now: datetime) -> Job:
    queue = request.queue
    checkpoint = request.checkpoint_interval
    if queue.may_preempt and checkpoint is None:
        checkpoint = queue.checkpoint_interval
    env = env_json(request.env)
    return Job(
        owner=request.owner,
        team=request.team,
        queue=queue,
        capability_class=request.capability_class,
        name=request.name,
        pods=request.pods,
        gpus_per_pod=request.gpus_per_pod,
        mig_profile=request.capability_class.mig_profile,
        image=request.image.strip(),
        command=list(request.command),
        args=list(request.args),
        env=env,
        env_from=list(request.env_from),
        # A plain value of a secret-looking name (the policy allowed it) is kept only while
        # the job may still start pods: the reconcile masks it once the job has ended.
        holds_secret_values=holds_secret_values(env),
        runtime_limit=request.runtime,
        checkpoint_interval=checkpoint,
        priority=request.job_priority,
        declared_gpu_memory_gb=request.declared_gpu_memory_gb,
        cpu_millicores_per_pod=request.cpu_millicores_per_pod,
        memory_mib_per_pod=request.memory_mib_per_pod,
        submitted_at=now,
    )


def job_checkpoint(*, job: Job, at: datetime | None = None) -> bool:
    """Record a real checkpoint of a running job (reported by the job with its token); False if
    the job is not running. Preemption then counts lost work from here."""
    at = at or timezone.now()
    with transaction.atomic():
        recorded = Job.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
            last_checkpoint_at=at
        )
        if recorded:
            JobEvent.objects.create(
                job_id=job.pk, at=at, kind=EventKind.CHECKPOINT, message="checkpoint reported"
            )
    return bool(recorded)
