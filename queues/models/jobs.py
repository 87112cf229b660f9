"""Jobs: their states, the timeline of events, submission keys, and the queues' live numbers and
estimates the reconcile keeps for the catalog."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q, Subquery

from queues.admission.reasons import ready_in_text, span_text
from queues.models.policy import CapabilityClass, GpuClass, Queue, Reservation, Team


class JobState(models.TextChoices):
    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"


ACTIVE_JOB_STATES = (JobState.PENDING, JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTED)


FINISHED_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


# The states in which a job's pods hold GPUs. A job that has left them (cancelled, preempted,
# failed) still holds its GPUs while its pods terminate (``Job.terminating``): see
# ``JobQuerySet.holding_gpus``.
GPU_HOLDING_STATES = (JobState.ADMITTED, JobState.RUNNING)


# The states in which a job may have a Kubernetes Job and pods (a preempted job until requeued).
K8S_JOB_STATES = (*GPU_HOLDING_STATES, JobState.PREEMPTED)


# Past waits count for this long: a queue's p50/p90 and the ranges estimates draw on.
WAIT_HISTORY_WINDOW = timedelta(days=14)


class JobQuerySet(models.QuerySet["Job"]):
    def admitted_recently(self, now: datetime) -> JobQuerySet:
        """Jobs admitted within the wait history window before ``now`` (their waits are the
        history a queue publishes)."""
        return self.filter(admitted_at__isnull=False, admitted_at__gte=now - WAIT_HISTORY_WINDOW)

    def holding_gpus(self) -> JobQuerySet:
        """Jobs whose pods hold GPUs now: admitted or running, or ended with pods still
        terminating — except a preempted job whose GPUs its preemptor, admitted, already holds
        (they are promised once; the preemptor's pods start when the victim's are gone). The
        one rule the catalog's free GPUs and the engine's snapshot share."""
        # The preemptors as a subquery, not a join: a join made PostgreSQL read every job
        # ever submitted to find the few terminating ones' preemptors, every cycle.
        holding = Q(state__in=GPU_HOLDING_STATES)
        preemptors = self.model.objects.filter(holding).order_by().values("pk")
        return self.filter(
            holding | (Q(terminating=True) & ~Q(preempted_for_id__in=Subquery(preemptors)))
        )


class CapacityKind(models.TextChoices):
    NOMINAL = "nominal"
    BORROWED = "borrowed"
    RESERVED = "reserved"


class Job(models.Model):
    """A member's request for GPUs: one Kubernetes Job, a gang when it has several pods."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_jobs"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    capability_class = models.ForeignKey(
        CapabilityClass, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=100, blank=True)
    pods = models.PositiveIntegerField(default=1)
    gpus_per_pod = models.PositiveIntegerField(
        default=1, help_text="Devices per pod: whole GPUs, MIG slices or time-slice replicas."
    )
    mig_profile = models.CharField(max_length=32, blank=True)
    cpu_millicores_per_pod = models.PositiveIntegerField(default=1000)
    memory_mib_per_pod = models.PositiveIntegerField(default=4096)
    declared_gpu_memory_gb = models.PositiveIntegerField(null=True, blank=True)
    image = models.CharField(max_length=500)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="Name → text, or a key of a Secret in the team's namespace "
        '({"secret": …, "key": …}). Values of secret-looking names are never shown '
        "(portal.masking).",
    )
    env_from = models.JSONField(
        default=list, blank=True, help_text="Secrets in the team's namespace: each key a variable."
    )
    holds_secret_values = models.BooleanField(
        default=False,
        help_text="Its environment keeps plain values of secret-looking names (the policy "
        "allowed them) that its pods may still need; masked once the job has ended.",
    )
    runtime_limit = models.DurationField()
    checkpoint_interval = models.DurationField(null=True, blank=True)
    priority = models.IntegerField(default=0)
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True
    )
    terminating = models.BooleanField(default=False)
    preempted_for = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="victims",
        help_text="The job this one was preempted for, while its pods terminate.",
    )
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.PROTECT, related_name="jobs", null=True, blank=True
    )
    nodes = models.JSONField(default=list, blank=True, help_text="Node of each pod.")
    capacity_kind = models.CharField(max_length=16, choices=CapacityKind.choices, blank=True)
    reservation = models.ForeignKey(
        Reservation, on_delete=models.PROTECT, related_name="jobs", null=True, blank=True
    )
    k8s_job_name = models.CharField(max_length=63, blank=True)
    submitted_at = models.DateTimeField(db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    cluster_failures = models.PositiveIntegerField(
        default=0, help_text="Creates the cluster refused (4xx); the job fails after a few."
    )
    rollbacks = models.PositiveIntegerField(
        default=0,
        help_text="Times in a row the cluster could not start it after admission (back-off).",
    )
    not_before = models.DateTimeField(
        null=True, blank=True, help_text="After a roll-back, not admitted again before this."
    )
    exit_code = models.IntegerField(null=True, blank=True)
    failure_reason = models.CharField(max_length=300, blank=True)
    pending_reasons = models.JSONField(default=list, blank=True)
    estimated_start = models.DateTimeField(
        null=True, blank=True, help_text="The start at the latest: every job runs to its limit."
    )
    likely_start = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their predicted runtimes."
    )
    start_range_low = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their 10th-percentile runtimes."
    )
    start_range_high = models.DateTimeField(
        null=True, blank=True, help_text="The start when jobs run their 90th-percentile runtimes."
    )
    estimated_start_note = models.CharField(
        max_length=300,
        blank=True,
        help_text="Why the start is unknown; beside a start, that it is projected.",
    )
    position = models.PositiveIntegerField(null=True, blank=True)
    queue_length = models.PositiveIntegerField(null=True, blank=True)
    planned_nodes = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "Where the last plan reserved its start: {gpu_class, nodes (one per pod)}; the next "
            "plan starts it there where they still fit."
        ),
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["team", "state"], name="job_team_state"),
            models.Index(fields=["queue", "state"], name="job_queue_state"),
            models.Index(fields=["owner", "state"], name="job_owner_state"),
            # The catalog's past waits read recent admissions, per queue and (the engine's
            # snapshot: the latest few thousand) across queues; few jobs are terminating.
            models.Index(fields=["queue", "admitted_at"], name="job_queue_admitted"),
            models.Index(fields=["admitted_at"], name="job_admitted"),
            # The longest waiters (the operations dashboard): pending jobs oldest first, without
            # walking a month of finished jobs in submission order.
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(
                fields=["terminating"], name="job_terminating", condition=Q(terminating=True)
            ),
            models.Index(
                fields=["holds_secret_values"],
                name="job_holds_secret_values",
                condition=Q(holds_secret_values=True),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(pods__gte=1), name="job_pods_positive"),
            models.CheckConstraint(
                condition=Q(gpus_per_pod__gte=1), name="job_gpus_per_pod_positive"
            ),
            models.CheckConstraint(
                condition=Q(cpu_millicores_per_pod__gt=0), name="job_cpu_positive"
            ),
            models.CheckConstraint(
                condition=Q(memory_mib_per_pod__gt=0), name="job_memory_positive"
            ),
            models.CheckConstraint(
                condition=Q(runtime_limit__gt=timedelta(0)),
                name="job_runtime_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.state})"

    def new_node_text(self, now: datetime) -> str:
        """``waiting for a new node, ready in about 6 min (p90 9 min)`` for a pending job
        whose reasons say a node pool is adding a node for it; empty otherwise."""
        if self.state != JobState.PENDING:
            return ""
        for reason in self.pending_reasons or []:
            details = reason.get("details") or {}
            if reason.get("code") != "Provisioning" or not details.get("ready_at"):
                continue
            ready = datetime.fromisoformat(details["ready_at"])
            ready_by = datetime.fromisoformat(details["ready_by"])
            late = max(ready_by - now, timedelta(0))
            soon = ready_in_text(ready - now)
            return f"waiting for a new node, ready {soon} (p90 {span_text(late)})"
        return ""

    @property
    def is_active(self) -> bool:
        """Not finished yet: pending, admitted, running or preempted (waiting to requeue)."""
        return self.state in ACTIVE_JOB_STATES

    @property
    def is_live(self) -> bool:
        """Still changing: active, or its pods are still terminating."""
        return self.is_active or self.terminating

    def stopping_until(self) -> datetime | None:
        """When a stopping job's pods are gone at the latest: its queue's grace period from when
        it was stopped (its latest event). None unless its pods are terminating. The reconcile's
        snapshot reads the same for every stopping job at once (``queues.reconcile.snapshot``)."""
        if not self.terminating:
            return None
        stopped = self.events.order_by("-at").values_list("at", flat=True).first()
        return None if stopped is None else stopped + self.queue.termination_grace


class EventKind(models.TextChoices):
    """What happened to a job, as its timeline and the API name it."""

    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    STARTED = "started"
    CHECKPOINT = "checkpoint"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    ROLLED_BACK = "rolled back"
    CLUSTER_REFUSED = "cluster refused"
    QUOTA_HELD = "held by quota"  # its binding reason turned QuotaExceeded (quota evidence)
    QUOTA_RELEASED = "quota no longer binding"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobEvent(models.Model):
    """One entry of a job's timeline (submitted, admitted, started, preempted, finished…)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=EventKind.choices)
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="job_event_job_at")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class QueueEstimate(models.Model):
    """When a queue's default job would start for a team now (1 GPU-equivalent, default runtime,
    cheapest allowed class), from the last reconcile's forecast: at the latest
    (``estimated_start``) and likely (``likely_start``), the same prediction as the jobs'."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="estimates")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="queue_estimates")
    estimated_start = models.DateTimeField(null=True, blank=True)
    likely_start = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "team"], name="queue_estimate_one_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.queue} for {self.team}: {self.estimated_start}"


class QueueStats(models.Model):
    """A queue's live numbers for the catalog, refreshed by every reconcile (pages read one row
    instead of summing the cluster per request): free GPU-equivalents per allowed class, past
    waits, and how many jobs wait and run."""

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, related_name="stats")
    free = models.JSONField(default=dict, help_text="GPU class → free GPU-equivalents (text)")
    wait_p50 = models.DurationField(null=True, blank=True)
    wait_p90 = models.DurationField(null=True, blank=True)
    pending = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    computed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "queue stats"

    def __str__(self) -> str:
        return f"{self.queue}: {self.pending} pending, {self.running} running"


class SubmissionKey(models.Model):
    """A submission its sender may send again (the form's one-time key after Back, a script's
    ``Idempotency-Key`` after a time-out): the jobs the first one stored, for a day. A repeat
    with the same key gets those jobs instead of new ones (``queues.jobs.services``)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submission_keys"
    )
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of the request's fields")
    jobs = models.JSONField(default=list, help_text="The ids of the jobs stored, in order.")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="submission_key_once_per_owner")
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.key} → {self.jobs}"
