"""The single sign-on pages: the start of an OpenID Connect login, the provider's redirect
back, the page that explains a refused login, and logging out. Thin: the checks live in
``oidc.py`` and ``identities.py``."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import authenticate, login
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from portal.roles import landing
from portal.sso.identities import LoginRefused
from portal.sso.oidc import (
    oidc_authorize_redirect,
    oidc_callback_identity,
    oidc_enabled,
    oidc_logout_url,
)

logger = logging.getLogger(__name__)

# Session keys: where to go after the login, and the ID token for logging out at the provider.
NEXT_KEY = "sso_next"
ID_TOKEN_KEY = "sso_id_token"


def sso_login(request: HttpRequest) -> HttpResponse:
    """Start an OpenID Connect login: off to the provider (``?next=`` is kept for after)."""
    if not oidc_enabled():
        raise Http404("single sign-on is not configured")
    target = request.GET.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        request.session[NEXT_KEY] = target
    else:
        request.session.pop(NEXT_KEY, None)
    try:
        return oidc_authorize_redirect(
            request, redirect_uri=request.build_absolute_uri(reverse("sso-callback"))
        )
    except LoginRefused as refusal:
        return sso_refused(request, refusal)


def sso_callback(request: HttpRequest) -> HttpResponse:
    """The provider's redirect back: verify, find or create the user, refresh their teams and
    roles from their groups, log them in. Any failed check is a page that says which."""
    if not oidc_enabled():
        raise Http404("single sign-on is not configured")
    try:
        identity, id_token = oidc_callback_identity(request)
        user = authenticate(request, identity=identity)
    except LoginRefused as refusal:
        return sso_refused(request, refusal)
    if user is None:  # no backend took it: the settings lack portal.sso.oidc.OidcBackend
        return sso_refused(
            request,
            LoginRefused(
                "not-configured",
                "Single sign-on is not set up completely on this portal.",
                detail="portal.sso.oidc.OidcBackend is not in AUTHENTICATION_BACKENDS",
                status=503,
            ),
        )
    target = request.session.pop(NEXT_KEY, "")
    login(request, user)
    if settings.OIDC_PROVIDER_LOGOUT:
        request.session[ID_TOKEN_KEY] = id_token
    return redirect(target or reverse(landing(user)))


def sso_refused(request: HttpRequest, refusal: LoginRefused) -> HttpResponse:
    logger.warning("login refused (%s): %s", refusal.code, refusal.detail or refusal.reason)
    return render(
        request,
        "registration/sso_refused.html",
        {"refusal": refusal, "oidc_enabled": oidc_enabled()},
        status=refusal.status,
    )


class LogoutView(auth_views.LogoutView):
    """Ends the portal session; with ``OIDC_PROVIDER_LOGOUT``, the provider's session too (the
    provider then sends the person back to the login page)."""

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        id_token = request.session.get(ID_TOKEN_KEY, "")
        response = super().post(request, *args, **kwargs)
        url = oidc_logout_url(
            id_token=id_token, post_logout_redirect_uri=request.build_absolute_uri(reverse("login"))
        )
        return HttpResponseRedirect(url) if url else response
