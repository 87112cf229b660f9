"""The admin side and the operations history: quota requests, what the reconcile saw (capacity,
pending, waits, team standing) pre-aggregated for /ops/, and the counters /metrics exports."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from queues.models.fields import gpu_amount_field
from queues.models.policy import GpuClass, Queue, Team


class QuotaRequestStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"


class QuotaRequest(models.Model):
    """A member's request for more quota of one GPU class for one team, with the evidence the
    portal had when it was filed; an admin approves (the quota changes through the policy
    service) or declines with a reason. Never deleted: the request and its evidence stay."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="quota_requests")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="quota_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    nominal = gpu_amount_field(help_text="Requested nominal quota (GPU-equivalents).")
    borrowing_limit = gpu_amount_field(help_text="Requested borrowing limit (GPU-equivalents).")
    justification = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16,
        choices=QuotaRequestStatus.choices,
        default=QuotaRequestStatus.PENDING,
        db_index=True,
    )
    created_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="quota_decisions",
        null=True,
        blank=True,
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    granted_nominal = gpu_amount_field(
        null=True, blank=True, help_text="Nominal quota granted (approved requests)."
    )
    granted_borrowing_limit = gpu_amount_field(
        null=True, blank=True, help_text="Borrowing limit granted (approved requests)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(nominal__gte=0), name="quota_request_nominal_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(borrowing_limit__gte=0), name="quota_request_borrowing_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"quota request {self.pk}: {self.team} · {self.gpu_class} ({self.status})"

    @property
    def partly_granted(self) -> bool:
        """Approved with less than was asked (the admin said why in ``decision_reason``)."""
        return self.status == QuotaRequestStatus.APPROVED and (
            self.granted_nominal != self.nominal
            or self.granted_borrowing_limit != self.borrowing_limit
        )


class CapacitySample(models.Model):
    """One GPU class's capacity by state as the reconcile saw it in one minute (the last cycle
    of the minute wins): GPU-equivalents in use by the portal's jobs, free, free but reserved
    for a team, unhealthy, in maintenance, held by pods the portal did not create; and the
    fragmentation of what is free: how many pods of 1, 2, 4 and 8 whole GPUs would fit now.
    Each row stands for one minute, so GPU-minutes are sums of rows (docs/operations-dashboard.md).
    """

    at = models.DateTimeField(help_text="The minute (UTC, seconds zero).")
    gpu_class = models.ForeignKey(
        GpuClass, on_delete=models.CASCADE, related_name="capacity_samples"
    )
    in_use = gpu_amount_field(default=Decimal(0))
    free = gpu_amount_field(default=Decimal(0))
    reserved_idle = gpu_amount_field(default=Decimal(0))
    unhealthy = gpu_amount_field(default=Decimal(0))
    maintenance = gpu_amount_field(default=Decimal(0))
    outside = gpu_amount_field(default=Decimal(0))
    largest_free = models.PositiveIntegerField(
        default=0, help_text="Most free whole GPUs on one in-service node."
    )
    slots = models.JSONField(
        default=dict, help_text='Pods of n whole GPUs that fit now: {"1": 24, "8": 0}'
    )

    class Meta:
        ordering = ["at", "gpu_class_id"]
        indexes = [models.Index(fields=["at"], name="capacity_sample_at")]
        constraints = [
            models.UniqueConstraint(fields=["gpu_class", "at"], name="capacity_sample_one_a_minute")
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class_id} at {self.at:%Y-%m-%d %H:%M}: {self.in_use} in use"

    @property
    def unheld(self) -> Decimal:
        """In service and held by nobody: free, reserved-but-idle included (what gang slots
        are counted on)."""
        return self.free + self.reserved_idle


class CapacityHour(models.Model):
    """One GPU class's ``CapacitySample`` rows of one past hour, summed (GPU-equivalent
    minutes per state, and how many minutes were sampled): the over-time views read these
    instead of every minute. Rolled up by the reconcile once the hour has passed."""

    hour = models.DateTimeField()
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.CASCADE, related_name="capacity_hours")
    minutes = models.PositiveIntegerField()
    in_use = models.DecimalField(max_digits=16, decimal_places=3)
    free = models.DecimalField(max_digits=16, decimal_places=3)
    reserved_idle = models.DecimalField(max_digits=16, decimal_places=3)
    unhealthy = models.DecimalField(max_digits=16, decimal_places=3)
    maintenance = models.DecimalField(max_digits=16, decimal_places=3)
    outside = models.DecimalField(max_digits=16, decimal_places=3)

    class Meta:
        ordering = ["hour", "gpu_class_id"]
        indexes = [models.Index(fields=["hour"], name="capacity_hour_hour")]
        constraints = [
            models.UniqueConstraint(fields=["gpu_class", "hour"], name="capacity_hour_one_per_hour")
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class_id} {self.hour:%Y-%m-%d %H}h: {self.minutes} minutes"


class PendingSample(models.Model):
    """How many jobs of one queue waited on one binding reason in one minute (the reconcile's
    last cycle of the minute)."""

    at = models.DateTimeField()
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="pending_samples")
    code = models.CharField(max_length=40)
    jobs = models.PositiveIntegerField()

    class Meta:
        ordering = ["at", "queue_id", "code"]
        indexes = [models.Index(fields=["at"], name="pending_sample_at")]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "code", "at"], name="pending_sample_one_a_minute"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue_id} {self.code} at {self.at:%Y-%m-%d %H:%M}: {self.jobs}"


class QueueWaitDay(models.Model):
    """One queue's waits on one UTC day: of the jobs admitted that day, how many, how many
    within the queue's wait target (its SLO), and the nearest-rank p50 and p90 of their waits.
    Rolled up by the reconcile (today's row is refreshed each minute, past days once)."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="wait_days")
    day = models.DateField()
    admitted = models.PositiveIntegerField(default=0)
    within_target = models.PositiveIntegerField(default=0)
    target = models.DurationField(help_text="The queue's wait target the day was measured with.")
    wait_p50 = models.DurationField(null=True, blank=True)
    wait_p90 = models.DurationField(null=True, blank=True)
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["day", "queue_id"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "day"], name="queue_wait_day_one_per_day")
        ]

    def __str__(self) -> str:
        return f"{self.queue_id} on {self.day}: {self.within_target}/{self.admitted} within target"


class TeamStats(models.Model):
    """A team's standing as the last reconcile saw it: GPU-equivalents its jobs hold per class,
    and its decayed normalized GPU-hours (what fair share orders teams by, divided by weight)."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="stats")
    held = models.JSONField(default=dict, help_text="GPU class → GPU-equivalents held (text)")
    recent_usage = models.DecimalField(max_digits=16, decimal_places=3, default=Decimal(0))
    computed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "team stats"

    def __str__(self) -> str:
        return f"{self.team_id}: {self.recent_usage} recent normalized GPU-h"


class MetricCounter(models.Model):
    """A monotonic counter /metrics exports, kept in the database so that every web worker,
    the Celery worker and beat add to one number (docs/operations-dashboard.md)."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True, help_text="e.g. an error's kind")
    value = models.FloatField(default=0)

    class Meta:
        ordering = ["name", "label"]
        constraints = [
            models.UniqueConstraint(fields=["name", "label"], name="metric_counter_one_per_label")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}} = {self.value}"
