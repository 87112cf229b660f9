"""A member's personal API tokens: create (the key is shown once) and revoke."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.http import PortalRequest
from portal.models import ApiToken


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. ci-scripts.")


@login_required
@never_cache  # it shows a new key once: no browser or proxy may keep a copy
def token_list(request: PortalRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    new_key = None
    if request.method == "POST" and form.is_valid():
        try:
            _, new_key = ApiToken.issue(user=request.user, name=form.cleaned_data["name"])
        except IntegrityError:
            form.add_error("name", "You already have a token with this name.")
    tokens = ApiToken.objects.filter(user=request.user)
    return render(request, "tokens.html", {"form": form, "tokens": tokens, "new_key": new_key})


@login_required
@require_POST
def token_revoke(request: PortalRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("tokens")
