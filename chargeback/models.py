"""Closed periods and their frozen statements.

A period is a calendar month. Open periods have no row: their statement is computed live. Closing
one stores its lines, which never change afterwards; usage that arrives later for it becomes an
adjustment line of the period closed next, naming the period it belongs to.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from django.conf import settings
from django.db import models

from queues.models import GpuClass, SharingMode, Team


def month_start(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)


def month_end(month: date) -> datetime:
    if month.month == 12:
        return datetime(month.year + 1, 1, 1, tzinfo=UTC)
    return datetime(month.year, month.month + 1, 1, tzinfo=UTC)


class Period(models.Model):
    """A closed calendar month (``month`` is its first day)."""

    month = models.DateField(unique=True)
    closed_at = models.DateTimeField()
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty when the scheduled close did it.",
    )

    class Meta:
        ordering = ["-month"]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m}"

    @property
    def start(self) -> datetime:
        return month_start(self.month)

    @property
    def end(self) -> datetime:
        return month_end(self.month)


class FrozenLine(models.Model):
    """One stored line of a closed period's statement, rounded as it was shown. An adjustment
    line (``adjustment_for`` set) is the change since that earlier period was closed."""

    period = models.ForeignKey(Period, on_delete=models.PROTECT, related_name="lines")
    adjustment_for = models.ForeignKey(
        Period, on_delete=models.PROTECT, related_name="adjustments", null=True, blank=True
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    cost_center = models.CharField(max_length=64)
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="+")
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices)
    currency = models.CharField(max_length=3, blank=True, help_text="Empty: not rated.")
    device_hours = models.DecimalField(max_digits=18, decimal_places=3)
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=3)
    normalized_gpu_hours = models.DecimalField(
        max_digits=18, decimal_places=3, null=True, blank=True
    )
    cost = models.DecimalField(max_digits=18, decimal_places=2, null=True, blank=True)
    versions = models.JSONField(default=list, help_text="Rate-card versions used.")

    class Meta:
        ordering = ["period", "adjustment_for", "team__name", "cost_center", "gpu_class__name"]
        indexes = [models.Index(fields=["period", "team"], name="frozen_line_period_team")]

    def __str__(self) -> str:
        return f"{self.period}: {self.team_id} {self.cost_center} {self.gpu_class_id}"


class Reopening(models.Model):
    """A closed month an admin reopened, with why, and its statement as it had been frozen (so
    what reopening changed can be shown against it, and nothing frozen is lost). Never deleted."""

    month = models.DateField(db_index=True)
    closed_at = models.DateTimeField(help_text="When the month had been closed.")
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty when the scheduled close had done it.",
    )
    reopened_at = models.DateTimeField()
    reopened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.TextField()
    frozen = models.JSONField(
        default=list,
        help_text="The frozen lines (statement and adjustments), as they were: team, "
        "cost_center, gpu_class, sharing_mode, adjustment_for (YYYY-MM or null), currency, "
        "device_hours, gpu_hours, normalized_gpu_hours, cost.",
    )

    class Meta:
        ordering = ["-reopened_at", "-id"]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} reopened {self.reopened_at:%Y-%m-%d %H:%M}"
