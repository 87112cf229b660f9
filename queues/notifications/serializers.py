"""API representations of a person's notification settings and of a team's webhook."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queues.models import NotificationChannel, NotificationEvent
from queues.notifications.preferences import (
    TEAM_EVENTS,
    WEBHOOK_URL_MAX,
    WEBHOOK_URL_PATTERN,
    webhook_url_problem,
)


class StrictBooleanField(serializers.BooleanField):
    """JSON's true or false, nothing else (DRF's reads 0, "yes" and "on" too)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


@extend_schema_field(
    {
        "type": "string",
        "pattern": f"^{WEBHOOK_URL_PATTERN}$",
        "maxLength": WEBHOOK_URL_MAX,
        "example": "https://hooks.slack.com/services/T000/B000/XXXX",
    }
)
class WebhookUrlField(serializers.CharField):
    pass


class PreferenceSerializer(serializers.Serializer):
    event = serializers.ChoiceField(choices=NotificationEvent.choices)
    channel = serializers.ChoiceField(choices=NotificationChannel.choices)
    enabled = StrictBooleanField()


class NotificationSettingsSerializer(serializers.Serializer):
    """Every event × channel with its state (yours, or the default), and your webhook."""

    preferences = PreferenceSerializer(
        many=True,
        required=False,
        help_text="Reading: every event and channel. Writing: those to change (others stay; "
        "of a pair named twice, the last counts).",
    )
    webhook_url = WebhookUrlField(
        allow_blank=True,
        required=False,
        trim_whitespace=False,
        help_text="Where webhook notifications are POSTed; empty: none. Leave out to keep it.",
    )
    webhook_secret = serializers.CharField(
        read_only=True,
        help_text="Signs each webhook POST: X-GPUPortal-Signature: sha256=HMAC-SHA256(secret, "
        "'<X-GPUPortal-Timestamp>.<body>') in hex.",
    )

    def validate_webhook_url(self, value: str) -> str:
        problem = webhook_url_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class TeamWebhookSerializer(serializers.Serializer):
    """A team's webhook (admins only): its URL and the events of the team's jobs it receives.
    Its signing secret is never shown through the API: ``secret_fingerprint`` tells which one
    is current; the admin page shows the secret itself."""

    team = serializers.CharField(read_only=True)
    url = WebhookUrlField(
        allow_blank=True,
        required=False,
        trim_whitespace=False,
        help_text="Where the team's notifications are POSTed; empty: none. Leave out to keep it.",
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=[(e.value, e.label) for e in TEAM_EVENTS]),
        required=False,
        allow_empty=True,
        help_text="The team's jobs' events it receives (default job_failed, job_preempted). "
        "Leave out to keep them.",
    )
    secret_fingerprint = serializers.CharField(
        read_only=True,
        help_text="The first 12 hex digits of SHA-256 of the signing secret (the secret is on "
        "/manage/team-webhooks/<team>/ only). Signature as for a person's webhook.",
    )

    def validate_url(self, value: str) -> str:
        problem = webhook_url_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value
