"""The notifications settings page (which events reach you on which channel), and the admin
side's team webhooks (/manage/team-webhooks/: each team's channel)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.http import PortalRequest, signed_in
from portal.roles import is_finance
from queues.catalog.selectors import teams_for
from queues.models import (
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    Team,
    TeamWebhook,
)
from queues.notifications.delivery import SIGNATURE_HEADER
from queues.notifications.forms import (
    TEAM_EVENT_LABELS,
    NotificationSettingsForm,
    TeamWebhookForm,
)
from queues.notifications.preferences import (
    preferences_of,
    preferences_set,
    team_webhook_of,
    team_webhook_secret_rotate,
    team_webhook_set,
    webhook_of,
    webhook_secret_rotate,
)
from queues.operations.access import admin_required


@login_required
def notification_settings(request: PortalRequest) -> HttpResponse:
    user = signed_in(request.user)
    hook = webhook_of(user)
    form = NotificationSettingsForm(
        request.POST or None,
        preferences=preferences_of(user),
        staff=is_finance(user),  # admins and finance
        initial={"webhook_url": hook.url},
    )
    if request.method == "POST" and form.is_valid():
        preferences_set(
            user=user, choices=form.choices(), webhook_url=form.cleaned_data["webhook_url"]
        )
        messages.success(request, "Notification settings saved.")
        return redirect("notifications:settings")
    recent = NotificationDelivery.objects.filter(user=user).order_by("-created_at", "-pk")[:10]
    # Your teams' channels hear of your jobs too: say which, and of what (not where).
    channels = [
        (hook.team.name, [TEAM_EVENT_LABELS[NotificationEvent(e)] for e in hook.events])
        for hook in TeamWebhook.objects.filter(team__in=teams_for(user))
        .exclude(url="")
        .select_related("team")
        .order_by("team__name")
    ]
    return render(
        request,
        "notifications/settings.html",
        {
            "team_channels": channels,
            "form": form,
            "channels": NotificationChannel,
            "hook": hook,
            "email": user.email,
            "signature_header": SIGNATURE_HEADER,
            "recent": recent,
        },
    )


@login_required
@require_POST
def webhook_secret_new(request: PortalRequest) -> HttpResponse:
    webhook_secret_rotate(user=signed_in(request.user))
    messages.success(request, "New signing secret: update your receiver.")
    return redirect("notifications:settings")


@admin_required
def team_webhooks(request: PortalRequest) -> HttpResponse:
    hooks = {h.team_id: h for h in TeamWebhook.objects.all()}
    teams = [(team, hooks.get(team.pk)) for team in Team.objects.active()]
    return render(request, "notifications/team_webhooks.html", {"teams": teams})


@admin_required
def team_webhook_edit(request: PortalRequest, team: str) -> HttpResponse:
    found = get_object_or_404(Team.objects.active(), name=team)
    hook = team_webhook_of(found)
    form = TeamWebhookForm(request.POST or None, initial={"url": hook.url, "events": hook.events})
    if request.method == "POST" and form.is_valid():
        team_webhook_set(
            team=found,
            url=form.cleaned_data["url"],
            events=form.cleaned_data["events"],
            now=timezone.now(),
        )
        messages.success(request, f"Team {found.name}'s webhook saved.")
        return redirect("team-webhooks:edit", team=found.name)
    recent = NotificationDelivery.objects.filter(team=found).order_by("-created_at", "-pk")[:10]
    return render(
        request,
        "notifications/team_webhook.html",
        {
            "team": found,
            "hook": hook,
            "form": form,
            "signature_header": SIGNATURE_HEADER,
            "recent": recent,
        },
    )


@admin_required
@require_POST
def team_webhook_secret_new(request: PortalRequest, team: str) -> HttpResponse:
    found = get_object_or_404(Team.objects.active(), name=team)
    team_webhook_secret_rotate(team=found)
    messages.success(request, f"New signing secret for team {found.name}: update its receiver.")
    return redirect("team-webhooks:edit", team=found.name)
