"""The notifications settings page: which events reach you on which channel."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.http import PortalRequest, signed_in
from portal.roles import is_finance
from queues.models import NotificationChannel, NotificationDelivery
from queues.notifications.delivery import SIGNATURE_HEADER
from queues.notifications.forms import NotificationSettingsForm
from queues.notifications.preferences import (
    preferences_of,
    preferences_set,
    webhook_of,
    webhook_secret_rotate,
)


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
    return render(
        request,
        "notifications/settings.html",
        {
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
