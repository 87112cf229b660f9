"""The test-only control API: register the client, create people and groups, set knobs.
Every call needs ``Authorization: Bearer <IDP_CONTROL_TOKEN>``."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.models import get_application_model

from tests.sso.provider.knobs import knobs_set


def _controlled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @csrf_exempt
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        expected = f"Bearer {settings.CONTROL_TOKEN}"
        if not hmac.compare_digest(request.headers.get("Authorization", ""), expected):
            return JsonResponse({"detail": "control token required"}, status=401)
        if request.method != "PUT":
            return JsonResponse({"detail": "PUT only"}, status=405)
        return view(request, json.loads(request.body or b"{}"), *args, **kwargs)

    return wrapped


@_controlled
def client(request: HttpRequest, body: dict[str, Any]) -> HttpResponse:
    application_model = get_application_model()
    application_model.objects.filter(client_id=body["client_id"]).delete()
    application_model.objects.create(
        name="GPU Portal",
        client_id=body["client_id"],
        client_secret=body["client_secret"],
        client_type=application_model.CLIENT_CONFIDENTIAL,
        authorization_grant_type=application_model.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(body["redirect_uris"]),
        post_logout_redirect_uris=" ".join(body.get("post_logout_redirect_uris", [])),
        algorithm=application_model.RS256_ALGORITHM,
        skip_authorization=True,
    )
    return JsonResponse({"ok": True})


@_controlled
def user(request: HttpRequest, body: dict[str, Any], username: str) -> HttpResponse:
    person, _ = User.objects.get_or_create(username=username)
    person.set_password(body["password"])
    person.email = body.get("email", "")
    person.first_name = body.get("first_name", "")
    person.last_name = body.get("last_name", "")
    person.save()
    person.groups.set([Group.objects.get_or_create(name=g)[0] for g in body.get("groups", [])])
    return JsonResponse({"ok": True})


@_controlled
def knobs(request: HttpRequest, body: dict[str, Any]) -> HttpResponse:
    knobs_set(body)
    return JsonResponse({"ok": True})
