"""REST endpoint of a person's notification settings: ``/api/notifications/``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.http import signed_in
from portal.parsers import PortalJSONParser
from portal.schema import ErrorDetailSerializer
from queues.notifications.preferences import preferences_of, preferences_set, webhook_of
from queues.notifications.serializers import NotificationSettingsSerializer


def _settings_of(user: User) -> dict[str, Any]:
    hook = webhook_of(user)
    return {
        "preferences": [
            {"event": event, "channel": channel, "enabled": enabled}
            for (event, channel), enabled in preferences_of(user).items()
        ],
        "webhook_url": hook.url,
        "webhook_secret": hook.secret,
    }


class NotificationSettingsView(APIView):
    """Which events reach you on which channel; the same as /settings/notifications/."""

    parser_classes = [PortalJSONParser]  # preferences are a list of objects

    @extend_schema(
        tags=["notifications"],
        summary="Your notification settings",
        responses={200: NotificationSettingsSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(NotificationSettingsSerializer(_settings_of(signed_in(request.user))).data)

    @extend_schema(
        tags=["notifications"],
        summary="Change your notification settings (the pairs given; the others stay)",
        request=NotificationSettingsSerializer,
        responses={
            200: NotificationSettingsSerializer,
            400: OpenApiResponse(ErrorDetailSerializer, description="Field → list of messages."),
        },
    )
    def put(self, request: Request) -> Response:
        user = signed_in(request.user)
        body = NotificationSettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        preferences_set(
            user=user,
            choices={
                (p["event"], p["channel"]): p["enabled"]
                for p in body.validated_data.get("preferences", [])
            },
            webhook_url=body.validated_data.get("webhook_url"),
        )
        return Response(NotificationSettingsSerializer(_settings_of(user)).data)
