"""REST endpoints of notifications: a person's settings (``/api/notifications/``) and, for
admins, a team's webhook (``/api/teams/<team>/webhook/``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.http import signed_in
from portal.parsers import PortalJSONParser
from portal.schema import ErrorDetailSerializer
from queues.audit import AuditSource, audit_context
from queues.models import Team, TeamWebhook
from queues.notifications.preferences import (
    preferences_of,
    preferences_set,
    secret_fingerprint,
    team_webhook_of,
    team_webhook_secret_rotate,
    team_webhook_set,
    webhook_of,
)
from queues.notifications.serializers import (
    NotificationSettingsSerializer,
    TeamWebhookSerializer,
)
from queues.operations.apis import IsAdmin


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


def _team_hook(hook: TeamWebhook) -> dict[str, Any]:
    return {
        "team": hook.team.name,
        "url": hook.url,
        "events": hook.events,
        "secret_fingerprint": secret_fingerprint(hook.secret),
    }


class TeamWebhookView(APIView):
    """A team's webhook: the events of its jobs it receives, and where (admins only)."""

    permission_classes = [IsAdmin]
    parser_classes = [PortalJSONParser]

    @extend_schema(
        tags=["notifications"],
        summary="A team's webhook (admins)",
        responses={
            200: TeamWebhookSerializer,
            403: ErrorDetailSerializer,
            404: ErrorDetailSerializer,
        },
    )
    def get(self, request: Request, team: str) -> Response:
        found = get_object_or_404(Team.objects.active(), name=team)
        return Response(TeamWebhookSerializer(_team_hook(team_webhook_of(found))).data)

    @extend_schema(
        tags=["notifications"],
        summary="Change a team's webhook: its URL and events (admins)",
        request=TeamWebhookSerializer,
        responses={
            200: TeamWebhookSerializer,
            400: OpenApiResponse(ErrorDetailSerializer, description="Field → list of messages."),
            403: ErrorDetailSerializer,
            404: ErrorDetailSerializer,
        },
    )
    def put(self, request: Request, team: str) -> Response:
        found = get_object_or_404(Team.objects.active(), name=team)
        body = TeamWebhookSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        with audit_context(actor=signed_in(request.user), source=AuditSource.API):
            hook = team_webhook_set(
                team=found,
                url=body.validated_data.get("url"),
                events=body.validated_data.get("events"),
                now=timezone.now(),
            )
        return Response(TeamWebhookSerializer(_team_hook(hook)).data)


class TeamWebhookSecretView(APIView):
    """A new signing secret for a team's webhook (admins); the answer has its fingerprint."""

    permission_classes = [IsAdmin]

    @extend_schema(
        tags=["notifications"],
        summary="Replace a team webhook's signing secret (admins)",
        request=None,
        responses={
            200: TeamWebhookSerializer,
            403: ErrorDetailSerializer,
            404: ErrorDetailSerializer,
        },
    )
    def post(self, request: Request, team: str) -> Response:
        found = get_object_or_404(Team.objects.active(), name=team)
        with audit_context(actor=signed_in(request.user), source=AuditSource.API):
            team_webhook_secret_rotate(team=found)
        return Response(TeamWebhookSerializer(_team_hook(team_webhook_of(found))).data)
