"""Notifications (queues/notifications/): who wants which events, webhooks, deliveries and the
outbox cursor."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from queues.models.billing import BudgetScope
from queues.models.jobs import Job
from queues.models.policy import Team


class NotificationEvent(models.TextChoices):
    """What a person may be told about, as the settings page and the API name it."""

    JOB_STARTED = "job_started", "My job started"
    JOB_FINISHED = "job_finished", "My job finished"
    JOB_FAILED = "job_failed", "My job failed"
    JOB_PREEMPTED = "job_preempted", "My job was preempted or stopped by a drain"
    JOB_DRAIN_AHEAD = "job_drain_ahead", "My job will be stopped by a drain"
    JOB_START_LATER = "job_start_later", "My waiting job's latest start moved later"
    QUOTA_REQUEST_DECIDED = "quota_request_decided", "My quota request was decided"
    # Admins and finance only:
    QUEUE_PAST_TARGET = "queue_past_target", "A queue is past its wait target for an hour"
    BUDGET_EXCEEDED = "budget_exceeded", "A team or cost center is past its month's budget"


class NotificationChannel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class NotificationPreference(models.Model):
    """One person's choice for one event on one channel. Without a row the default holds
    (``queues.notifications.preferences.DEFAULTS``)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    channel = models.CharField(max_length=16, choices=NotificationChannel.choices)
    enabled = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "event", "channel"], name="notification_preference_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.event} {self.channel}: {self.enabled}"


class NotificationWebhook(models.Model):
    """A person's webhook: where their notifications are POSTed, and the secret that signs them
    (``X-GPUPortal-Signature``). The secret is shown to its owner, who needs it to verify."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_webhook"
    )
    url = models.URLField(max_length=500, blank=True)
    secret = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.user_id} → {self.url or '(none)'}"


class TeamWebhook(models.Model):
    """A team's webhook (set by admins): its jobs' events of the kinds in ``events`` POSTed to
    one URL — the team's channel — signed with the team's own secret. The secret is shown on the
    admin page only, never through the API."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="notification_webhook")
    url = models.URLField(max_length=500, blank=True)
    secret = models.CharField(max_length=64)
    events = models.JSONField(default=list, blank=True, help_text='e.g. ["job_failed"]')
    since = models.DateTimeField(
        null=True, blank=True, help_text="URL or events last changed: earlier events are not sent."
    )

    def __str__(self) -> str:
        # The audit log's name for it (queues.audit): the team's.
        return self.team.name


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class NotificationDelivery(models.Model):
    """One event for one person on one channel. The unique key is what makes a notification
    go out at most once per event and channel: collecting an event twice (a retried task, two
    workers) adds no row, and a row is sent only by whoever claimed it (``claimed_by``)."""

    key = models.CharField(max_length=200, help_text="The event: job:42:failed:1234, …")
    # For a person, or for a team's webhook: one of the two.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="notification_deliveries",
        null=True,
        blank=True,
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        related_name="notification_deliveries",
        null=True,
        blank=True,
    )
    channel = models.CharField(max_length=16, choices=NotificationChannel.choices)
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    subject = models.CharField(max_length=300)
    text = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="After a failed send: not tried again before this."
    )
    claimed_by = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    message_id = models.CharField(
        max_length=200, blank=True, help_text="The message it went out in (a digest: several)."
    )
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "user", "channel"], name="notification_delivery_once"
            ),
            models.UniqueConstraint(
                fields=["key", "team", "channel"],
                condition=Q(team__isnull=False),
                name="notification_delivery_team_once",
            ),
            models.CheckConstraint(
                condition=Q(user__isnull=False, team__isnull=True)
                | Q(user__isnull=True, team__isnull=False),
                name="notification_delivery_user_or_team",
            ),
        ]
        indexes = [
            models.Index(fields=["user", "channel", "status"], name="notification_due"),
            models.Index(fields=["team", "channel", "status"], name="notification_team_due"),
        ]

    def __str__(self) -> str:
        to = f"team {self.team_id}" if self.team_id else self.user_id
        return f"{self.key} → {to} by {self.channel}: {self.status}"


class BudgetOverrun(models.Model):
    """A budget whose month's spend reached its amount: recorded once per budget and month by
    chargeback (``chargeback.budgets.budget_overruns_record``, the unique key), with the numbers
    as they were then; notifications read it as an outbox (admins and finance hear of it)."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    name = models.CharField(max_length=64)
    month = models.DateField(help_text="The month's first day.")
    amount = models.DecimalField(max_digits=18, decimal_places=2)
    spent = models.DecimalField(max_digits=18, decimal_places=2)
    currency = models.CharField(max_length=3)
    at = models.DateTimeField(help_text="When the spend was seen past the budget.")

    class Meta:
        ordering = ["-at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "name", "month"], name="budget_overrun_once_a_month"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} {self.month:%Y-%m}: {self.spent} of {self.amount}"


class NotificationEstimate(models.Model):
    """A waiting job's "at the latest" as its owner last heard it (or first saw it): the start
    a later move is measured from."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="notified_estimate")
    estimated_start = models.DateTimeField()

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.estimated_start}"


class NotificationCursor(models.Model):
    """How far the collector has read the job timeline (the last ``JobEvent`` id); one row."""

    name = models.CharField(max_length=32, unique=True)
    position = models.BigIntegerField(default=0)
    start = models.BigIntegerField(
        default=0, help_text="The last id when collecting began: what came before is history."
    )

    def __str__(self) -> str:
        return f"{self.name} at {self.position}"
