"""Notifications (queues/notifications/): who wants which events, webhooks, deliveries and the
outbox cursor."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from queues.models.jobs import Job


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
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries"
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
            )
        ]
        indexes = [
            models.Index(fields=["user", "channel", "status"], name="notification_due"),
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.user_id} by {self.channel}: {self.status}"


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
