"""API representations of a person's notification settings."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from queues.models import NotificationChannel, NotificationEvent


class PreferenceSerializer(serializers.Serializer):
    event = serializers.ChoiceField(choices=NotificationEvent.choices)
    channel = serializers.ChoiceField(choices=NotificationChannel.choices)
    enabled = serializers.BooleanField()


class NotificationSettingsSerializer(serializers.Serializer):
    """Every event × channel with its state (yours, or the default), and your webhook."""

    preferences = PreferenceSerializer(
        many=True,
        help_text="Reading: every event and channel. Writing: those to change (others stay).",
    )
    webhook_url = serializers.URLField(
        max_length=500,
        allow_blank=True,
        required=False,
        help_text="Where webhook notifications are POSTed; empty: none. Leave out to keep it.",
    )
    webhook_secret = serializers.CharField(
        read_only=True,
        help_text="Signs each webhook POST: X-GPUPortal-Signature: sha256=HMAC-SHA256(secret, "
        "'<X-GPUPortal-Timestamp>.<body>') in hex.",
    )

    def validate_preferences(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pairs = [(p["event"], p["channel"]) for p in value]
        if len(pairs) != len(set(pairs)):
            raise serializers.ValidationError("an event and channel is named twice")
        return value

    def validate_webhook_url(self, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise serializers.ValidationError("an http:// or https:// address")
        return value
