"""The job pass: each job's state follows its Kubernetes Job and pods."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from portal.formatting import format_duration
from portal.masking import mask_secret_values
from queues import admission as engine
from queues.admission.reasons import time_text
from queues.cluster.pods import PodFacts, parse_time
from queues.cluster.secrets import CONFIG_ERROR, MissingSecret, env_of_json, missing_secret
from queues.models import (
    FINISHED_JOB_STATES,
    K8S_JOB_STATES,
    EventKind,
    Job,
    JobEvent,
    JobState,
)
from queues.reconcile.facts import ClusterView, CycleReport
from queues.reconcile.rows import update_from_rows

logger = logging.getLogger(__name__)

# An admitted job whose pods the cluster cannot all start within this long is rolled back to
# pending (the scheduler's message is kept in its history).
# The cluster reports start times to the second (a pod that started at :00.9 says :00), and a
# pod's completion reaches the portal a cycle later: a job that ends within its runtime limit
# must not be called timed out in between. The cluster enforces the limit itself (the Job's
# deadline); the portal only steps in past this grace.
RUNTIME_LIMIT_GRACE = timedelta(seconds=30)
START_TIMEOUT = timedelta(minutes=5)
# A Job created this long ago that a cycle does not see is taken for deleted outside the portal;
# younger, it may just not have reached this process's watch yet (a Job created by another
# worker process: a process counts its own, ``ClusterMirror.expect``).
JOB_SHOW_GRACE = timedelta(seconds=30)


# A rolled-back job is not admitted again before a back-off that doubles with each roll-back in
# a row (1, 2, 4 … minutes, at most an hour): the engine does not model everything the cluster
# checks (CPU, memory), and a job it cannot place would otherwise be admitted, stuck and rolled
# back over and over, holding GPUs others could use. A start resets it.
ROLLBACK_BACKOFF = timedelta(minutes=1)


MAX_ROLLBACK_BACKOFF = timedelta(hours=1)


IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})


TERMINATING_STATES = (JobState.PREEMPTED, JobState.CANCELLED, JobState.FAILED)


def job_transition(
    job: Job,
    *,
    to: str,
    kind: EventKind,
    message: str,
    now: datetime,
    details: dict[str, Any] | None = None,
    counted: tuple[CycleReport, str] | None = None,
    **fields: Any,
) -> bool:
    """Move ``job`` from the state it was read in to ``to``, once: a conditional UPDATE, and the
    timeline event only if this call made the change; ``counted`` (a report and a label) counts
    the change in the cycle's report. Inside ``job_moves`` the change is written with the
    pass's others at its end (and counted then, if it happened); this returns True and the job
    shows its new state meanwhile."""
    moves = _MOVES.get()
    if moves is not None:
        moves.append(_Move(job, job.state, to, kind, message, now, details, counted, fields))
        job.state = to
        return True
    # savepoint=False: inside jobs_sync's transaction a savepoint per job would cost two more
    # round trips each, and nothing here is caught to roll back to.
    with transaction.atomic(savepoint=False):
        moved = Job.objects.filter(pk=job.pk, state=job.state).update(state=to, **fields)
        if moved:
            JobEvent.objects.create(
                job_id=job.pk, at=now, kind=kind, message=message, details=details or {}
            )
    if moved:
        transition_log(job.pk, job.state, to, kind, message)
        if counted is not None:
            counted[0].transitions[counted[1]] += 1
        job.state = to
    return bool(moved)


@dataclass
class _Move:
    job: Job
    was: str
    to: str
    kind: EventKind
    message: str
    now: datetime
    details: dict[str, Any] | None
    counted: tuple[CycleReport, str] | None
    fields: dict[str, Any]


_MOVES: ContextVar[list[_Move] | None] = ContextVar("job_moves", default=None)


@contextmanager
def job_moves() -> Iterator[None]:
    """The ``job_transition`` calls made inside, written together when it ends (PostgreSQL; at
    once elsewhere): per step, and per (from, to, fields) of that step, one conditional UPDATE
    from the rows as JSON returning the jobs it moved, then every event in one insert. A pass
    that starts and ends hundreds of short jobs made a statement pair per change. Each change
    still moves a job only from the state it was read in, once, and a job's second change of
    the pass (admitted → running → succeeded) runs after its first and only if it happened.
    Call it inside the transaction the changes belong to."""
    if connection.vendor != "postgresql":
        yield
        return
    moves: list[_Move] = []
    token = _MOVES.set(moves)
    try:
        yield
    finally:
        _MOVES.reset(token)
    _moves_write(moves)


def _moves_write(todo: list[_Move]) -> None:
    steps: dict[int, dict[tuple[str, str, tuple[str, ...]], list[_Move]]] = {}
    seen: dict[int, int] = {}
    for move in todo:
        step = seen.get(move.job.pk, 0)
        seen[move.job.pk] = step + 1
        group = (move.was, move.to, tuple(sorted(move.fields)))
        steps.setdefault(step, {}).setdefault(group, []).append(move)
    done: list[_Move] = []
    for step in sorted(steps):
        for (was, to, names), moves in steps[step].items():
            moved = update_from_rows(
                Job,
                {m.job.pk: {"state": to, **{n: m.fields[n] for n in names}} for m in moves},
                where={"state": was},
            )
            done += [m for m in moves if m.job.pk in moved]
    JobEvent.objects.bulk_create(
        JobEvent(job_id=m.job.pk, at=m.now, kind=m.kind, message=m.message, details=m.details or {})
        for m in done
    )
    for move in done:
        transition_log(move.job.pk, move.was, move.to, move.kind, move.message)
        if move.counted is not None:
            move.counted[0].transitions[move.counted[1]] += 1


def transition_log(job_id: int, was: str, to: str, kind: EventKind, message: str) -> None:
    """The log line of a job's state change (``job_transition``, and batches of them)."""
    logger.info(
        "job %s: %s → %s: %s",
        job_id,
        was,
        to,
        message,
        extra={"job_id": job_id, "from_state": was, "to_state": to, "event": kind},
    )


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
        "preempted_for": None,
        "pending_reasons": [],
    }


def jobs_sync(view: ClusterView, *, now: datetime, report: CycleReport) -> None:
    """Move every job the cluster holds (or held) to the state the cluster reports."""
    pods_of = view.pods_of()
    # Only the fields the passes below read: thousands of running jobs are looked at every
    # cycle, and their JSON fields (environment, command, reasons) cost the most to load.
    jobs = Job.objects.filter(
        Q(state__in=K8S_JOB_STATES) | Q(state__in=TERMINATING_STATES, terminating=True)
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
    with transaction.atomic(), job_moves():
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
        job_transition(
            job,
            to=JobState.PENDING,
            kind=EventKind.REQUEUED,
            now=now,
            message=message,
            **_requeue_fields(job),
            **held,
            counted=(report, "preempted→pending"),
        )
    else:
        Job.objects.filter(pk=job.pk, terminating=True).update(terminating=False)


def _sync_admitted(
    job: Job, pods: list[PodFacts], k8s: dict | None, *, now: datetime, report: CycleReport
) -> None:
    """An admitted job follows its Job and pods: gone (deleted outside the portal), an image that
    cannot be pulled (failed), every pod started (running), already finished, or stuck past the
    start timeout (rolled back to the queue)."""
    if not job.k8s_job_name:
        return  # not created yet: cluster_apply creates it
    if k8s is None:
        if job.admitted_at is None or now - job.admitted_at >= JOB_SHOW_GRACE:
            _deleted_outside(job, pods, now=now, report=report)
        return
    if _image_pull_failed(job, pods, now=now, report=report):
        return
    started = [p for p in pods if p.container.started_at is not None]
    if len(started) >= job.pods:
        _gang_started(job, started, now=now, report=report)
        if job.state == JobState.RUNNING and _finished(k8s):
            # Started and finished since the last cycle (a short job): both in this one, or
            # its GPUs would wait a cycle more to be given to the next job.
            _sync_running(job, pods, k8s, now=now, report=report)
        return
    if _finished(k8s):
        _sync_running(job, pods, k8s, now=now, report=report)
        return
    if _config_error(job, pods, now=now, report=report):
        return  # rolling back would not help: the Secret is missing wherever it runs
    stuck = _unschedulable_noted(job, pods)
    if job.admitted_at and now - job.admitted_at > START_TIMEOUT:
        _roll_back(job, started=len(started), stuck=stuck, now=now, report=report)


def _image_pull_failed(
    job: Job, pods: list[PodFacts], *, now: datetime, report: CycleReport
) -> bool:
    """Fail the job when a pod's image cannot be pulled (it never will be by waiting)."""
    pulls = [p for p in pods if p.container.reason in IMAGE_PULL_FAILURES]
    if not pulls:
        return False
    pod = pulls[0]
    job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        now=now,
        message=f"image {job.image} could not be pulled: "
        f"{pod.container.message or pod.container.reason}",
        failure_reason=f"{pod.container.reason}: {pod.container.message}"[:300],
        finished_at=now,
        terminating=True,
        counted=(report, "admitted→failed"),
    )
    return True


def _config_error(job: Job, pods: list[PodFacts], *, now: datetime, report: CycleReport) -> bool:
    """A pod the kubelet cannot configure (``CreateContainerConfigError``: a Secret or key its
    environment references is missing) waits bound to its node, holding its GPUs, until the
    Secret exists. The job shows why in plain words, with the command that fixes it, and fails
    ``MISSING_SECRET_GRACE_SECONDS`` after its admission if it still waits, giving its GPUs
    back. Returns whether a pod is in that state."""
    stuck = next((p for p in pods if p.container.reason == CONFIG_ERROR), None)
    if stuck is None:
        return False
    cluster_message = stuck.container.message
    missing = missing_secret(cluster_message, namespace=stuck.namespace)
    deadline = (job.admitted_at or now) + timedelta(seconds=settings.MISSING_SECRET_GRACE_SECONDS)
    what = _missing_text(missing, cluster_message)
    if now >= deadline:
        job_transition(
            job,
            to=JobState.FAILED,
            kind=EventKind.FAILED,
            now=now,
            message=f"its pods could not start: {what}; gave its GPUs back after waiting "
            f"{minutes_text(deadline - (job.admitted_at or now))}",
            details={"cluster_reason": CONFIG_ERROR, "cluster_message": cluster_message},
            failure_reason=f"{CONFIG_ERROR}: {what}"[:300],
            finished_at=now,
            terminating=True,
            counted=(report, "admitted→failed"),
        )
        return True
    env = Job.objects.filter(pk=job.pk).values_list("env", flat=True).first() or {}
    reason = engine.PendingReason(
        engine.ReasonCode.CONTAINER_CONFIG_ERROR,
        f"admitted, but its pods cannot start: {what}",
        {
            "cluster_reason": CONFIG_ERROR,
            "cluster_message": cluster_message,
            "namespace": missing.namespace if missing else stuck.namespace,
            "secret": missing.secret if missing else "",
            "key": missing.key if missing else "",
        },
        f"{_missing_fix(missing, env)}; the job starts once it is there, or fails at "
        f"{time_text(deadline)} and gives its GPUs back",
    )
    Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
        pending_reasons=[reason.to_dict()]
    )
    return True


def _missing_text(missing: MissingSecret | None, cluster_message: str) -> str:
    """What is missing, in plain words (the kubelet's own when it is not a Secret)."""
    if missing is None:
        return f"the cluster cannot configure its container ({cluster_message})"
    if missing.key:
        return f"Secret {missing.secret} in namespace {missing.namespace} has no key {missing.key}"
    return f"Secret {missing.secret} does not exist in namespace {missing.namespace}"


def _missing_fix(missing: MissingSecret | None, env: dict[str, Any]) -> str:
    """The command that makes a missing Secret or key exist (its value left for the member)."""
    if missing is None:
        return "fix what the cluster names"
    ns, secret = missing.namespace, missing.secret
    if missing.key:
        return (
            f"add the key: kubectl patch secret {secret} -n {ns} --type merge -p "
            f'\'{{"stringData": {{"{missing.key}": "…"}}}}\''
        )
    keys = sorted(
        {v.key for v in env_of_json(env).values() if not isinstance(v, str) and v.secret == secret}
    ) or ["<key>"]
    literals = " ".join(f"--from-literal={key}=…" for key in keys)
    return f"create it: kubectl create secret generic {secret} {literals} -n {ns}"


def _gang_started(job: Job, started: list[PodFacts], *, now: datetime, report: CycleReport) -> None:
    """Every pod runs: the job is running from when its last rank started."""
    start = max(at for p in started if (at := p.container.started_at) is not None)
    job_transition(
        job,
        to=JobState.RUNNING,
        kind=EventKind.STARTED,
        now=now,
        message=f"{job.pods} pod(s) running on {', '.join(sorted({p.node for p in started}))}",
        started_at=start,
        pending_reasons=[],
        rollbacks=0,
        not_before=None,
        counted=(report, "admitted→running"),
    )


def _unschedulable_noted(job: Job, pods: list[PodFacts]) -> str:
    """Keep the cluster scheduler's own words as the job's reason while a pod cannot be
    placed; returns them ("" when every pod is placed)."""
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
    return stuck


def _roll_back(job: Job, *, started: int, stuck: str, now: datetime, report: CycleReport) -> None:
    """Back to the queue after the start timeout, held back for a back-off that doubles with
    each roll-back in a row (the requeue, once its pods are gone, holds it back from then)."""
    rollbacks = job.rollbacks + 1
    backoff = rollback_backoff(rollbacks)
    message = (
        f"only {started} of {job.pods} pods started within {minutes_text(START_TIMEOUT)}"
        + (f"; the scheduler said: {stuck}" if stuck else "")
        + f"; back in the queue once its pods are gone, held back {minutes_text(backoff)}"
    )
    job_transition(
        job,
        to=JobState.PREEMPTED,
        kind=EventKind.ROLLED_BACK,
        now=now,
        message=message,
        details={
            "scheduler_message": stuck,
            "started_pods": started,
            "rollbacks": rollbacks,
            "backoff_seconds": int(backoff.total_seconds()),
        },
        terminating=True,
        rollbacks=rollbacks,
        not_before=now + backoff,
        counted=(report, "admitted→rolled back"),
    )


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
    running = not outcome and job.state == JobState.RUNNING
    if running and _pod_deleted_outside(job, pods, now=now, report=report):
        return
    finished = [p.container.finished_at for p in pods if p.container.finished_at]
    completion = parse_time((k8s.get("status") or {}).get("completionTime"))
    end = completion or (max(finished) if finished else now)
    if outcome == "Complete":
        job_transition(
            job,
            to=JobState.SUCCEEDED,
            kind=EventKind.SUCCEEDED,
            now=now,
            message="all pods completed",
            finished_at=end,
            exit_code=0,
            counted=(report, f"{before}→succeeded"),
        )
        return
    if outcome.startswith("Failed"):
        cluster_reason = outcome.split(":", 1)[1]
        bad = next((p for p in pods if p.container.exit_code not in (None, 0)), None)
        if cluster_reason == "DeadlineExceeded":
            reason = "TimedOut"
            message = f"ran past its runtime limit of {format_duration(job.runtime_limit)}"
        elif bad is not None and bad.container.reason == "OOMKilled":
            reason = "OOMKilled"
            message = f"pod {bad.name} ran out of memory (exit code {bad.container.exit_code})"
        elif bad is not None:
            reason = bad.container.reason or "Error"
            message = f"pod {bad.name} exited with code {bad.container.exit_code}"
        else:
            reason = cluster_reason or "Failed"
            message = f"the cluster marked the Job failed ({cluster_reason})"
        job_transition(
            job,
            to=JobState.FAILED,
            kind=EventKind.FAILED,
            now=now,
            message=message,
            failure_reason=reason,
            exit_code=bad.container.exit_code if bad else None,
            finished_at=max(finished) if finished else now,
            counted=(report, f"{before}→failed"),
        )
        return
    overdue = (
        job.started_at is not None
        and now > job.started_at + job.runtime_limit + RUNTIME_LIMIT_GRACE
    )
    if job.state == JobState.RUNNING and overdue:
        job_transition(
            job,
            to=JobState.FAILED,
            kind=EventKind.FAILED,
            now=now,
            message=f"ran past its runtime limit of {format_duration(job.runtime_limit)}",
            failure_reason="TimedOut",
            finished_at=now,
            terminating=True,
            counted=(report, "running→failed"),
        )


def _pod_deleted_outside(
    job: Job, pods: list[PodFacts], *, now: datetime, report: CycleReport
) -> bool:
    """A running job whose pod someone else is deleting (``kubectl delete pod``, an eviction):
    the portal did not stop it, and its Job allows no pod to be replaced, so it has failed. Say
    so at once, in those words, and show it stopping until its pods are gone (their GPUs are
    held until then); returns whether that happened."""
    deleted = next((p for p in pods if p.terminating), None)
    if deleted is None:
        return False
    gone_by = deleted.deleted_at or now + timedelta(seconds=deleted.grace_seconds)
    return job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        now=now,
        message=f"pod {deleted.name} was deleted outside the portal (kubectl delete pod, or an "
        f"eviction); its pods end by {time_text(gone_by)} and give their GPUs back",
        failure_reason="pod deleted outside the portal",
        finished_at=now,
        terminating=True,
        counted=(report, "running→failed"),
    )


def _deleted_outside(job: Job, pods: list[PodFacts], *, now: datetime, report: CycleReport) -> None:
    job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        now=now,
        message="its Kubernetes Job was deleted outside the portal",
        failure_reason="deleted outside the portal",
        finished_at=now,
        terminating=bool(pods),
        counted=(report, "deleted outside"),
    )


def secret_values_mask() -> int:
    """Mask the plain values of secret-looking variables (the policy allowed them) of jobs that
    have ended: a job keeps them only while it may still start pods. Returns how many jobs."""
    ended = Job.objects.filter(holds_secret_values=True, state__in=FINISHED_JOB_STATES)
    masked = 0
    for job_id, env in ended.values_list("id", "env"):
        masked += Job.objects.filter(
            pk=job_id, holds_secret_values=True, state__in=FINISHED_JOB_STATES
        ).update(env=mask_secret_values(env), holds_secret_values=False)
    return masked
