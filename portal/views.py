"""Project-level views: health for load balancers and the home redirect."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views import defaults
from django.views.decorators.http import require_safe

from portal.login_throttle import ThrottledAuthenticationForm
from portal.roles import landing
from portal.sso.oidc import oidc_enabled


@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    """200 when the database answers, 503 otherwise (no authentication: load balancers call it)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return JsonResponse({"status": "unavailable", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})


def home(request: HttpRequest) -> HttpResponse:
    """Each role lands where its work is (``portal.roles.landing``)."""
    return redirect(landing(request.user))


class LoginView(auth_views.LoginView):
    """After logging in, each role lands where its work is (``portal.roles.landing``). A locked
    username (``portal.login_throttle``) is answered 429 with the form saying until when. With
    single sign-on the page offers it first; the password form stays for LDAP and for whom
    ``PASSWORD_LOGIN`` lets use a local password."""

    authentication_form = ThrottledAuthenticationForm

    def get_default_redirect_url(self) -> str:
        return reverse(landing(self.request.user))

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(
            {
                "oidc_enabled": oidc_enabled(),
                "oidc_label": settings.OIDC_LOGIN_LABEL,
                "ldap_enabled": bool(settings.LDAP_SERVER_URI),
                "password_login": settings.PASSWORD_LOGIN,
            }
        )
        return context

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if form.locked_until is not None:
            response.status_code = 429
            seconds = (form.locked_until - timezone.now()).total_seconds()
            response["Retry-After"] = str(max(1, math.ceil(seconds)))
        return response


# Django's error pages, answered in the API's JSON shape ({"detail": "…"}) under /api/ (scripts
# parse it) and as the usual HTML pages everywhere else. DRF answers most API errors itself;
# these are what reaches Django: an unknown URL, a body Django refuses (too many form fields, a
# malformed upload), a crash.
def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": f"Bad request: {exception}"}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            {"detail": "You do not have permission to perform this action."}, status=403
        )
    return defaults.permission_denied(request, exception)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


# How long a client should wait before trying again while the database is away (a restart or a
# fail-over takes seconds; the connection is re-opened by the next request).
DATABASE_RETRY_AFTER_SECONDS = 5


def error(request: HttpRequest) -> HttpResponse:
    """An uncaught exception (``handler500``). A database that is down or restarting is no bug:
    503 with ``Retry-After``, as JSON under /api/ and a short page elsewhere (rendered without the
    database). Anything else is 500, JSON under /api/."""
    exception = sys.exc_info()[1]
    if isinstance(exception, (OperationalError, InterfaceError)):
        detail = "The database is unavailable; try again in a few seconds."
        response: HttpResponse
        if _is_api(request):
            response = JsonResponse({"detail": detail}, status=503)
        else:
            response = HttpResponse(
                f"<!doctype html><title>Unavailable</title><h1>Unavailable</h1><p>{detail}</p>",
                status=503,
            )
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response
    if _is_api(request):
        return JsonResponse({"detail": "Internal server error."}, status=500)
    return defaults.server_error(request)


def plotly_js(request: HttpRequest) -> FileResponse:
    """plotly.js from the installed plotly package (never a CDN), cached for a year: its URL
    carries the version (``?v=``), so an upgrade is a new URL."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    response = FileResponse(path.open("rb"), content_type="text/javascript")
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response


def plotly_version() -> str:
    import plotly

    return str(plotly.__version__)
