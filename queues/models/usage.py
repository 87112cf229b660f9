"""Usage: one interval per pod, what chargeback and fair share count."""

from __future__ import annotations

from fractions import Fraction

from django.db import models
from django.db.models import F, Q

from queues.models.jobs import Job
from queues.models.policy import GpuClass, SharingMode, Team


class UsageInterval(models.Model):
    """One pod's hold on GPUs, with the start and end the cluster reported.

    Written by the reconcile, rated by chargeback. One row per pod (its UID is unique), so a
    hold is never opened or counted twice. An end the cluster did not report (the pod vanished)
    is the deletion time plus grace, or when the pod was first seen gone, and is marked estimated.
    """

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="usage")
    pod_uid = models.CharField(max_length=64, unique=True)
    pod_name = models.CharField(max_length=253)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="usage")
    cost_center = models.CharField(max_length=64)
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="usage")
    node = models.CharField(max_length=253)
    devices = models.PositiveIntegerField()
    share_numerator = models.PositiveIntegerField(default=1)
    share_denominator = models.PositiveIntegerField(default=1)
    sharing_mode = models.CharField(
        max_length=16,
        choices=SharingMode.choices,
        default=SharingMode.EXCLUSIVE,
        help_text="How the devices were shared: whole GPUs, MIG slices or time-slice replicas "
        "(a share of 1/7 alone cannot tell a 1g.10gb slice from one of 7 replicas).",
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end_estimated = models.BooleanField(default=False)
    pod_deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pod was seen terminating (for an estimated end)."
    )
    grace_seconds = models.PositiveIntegerField(default=30)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["team", "started_at"], name="usage_team_started")]
        constraints = [
            models.CheckConstraint(condition=Q(devices__gte=1), name="usage_devices_positive"),
            models.CheckConstraint(
                condition=Q(share_numerator__gte=1)
                & Q(share_denominator__gte=1)
                & Q(share_numerator__lte=F("share_denominator")),
                name="usage_share_in_unit_interval",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="usage_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} on {self.node}: {self.devices} × {self.share}"

    @property
    def share(self) -> Fraction:
        return Fraction(self.share_numerator, self.share_denominator)
