"""API representations of a person's notification settings."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queues.models import NotificationChannel, NotificationEvent
from queues.notifications.preferences import (
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
