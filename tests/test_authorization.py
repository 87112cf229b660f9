"""Who may call what, for every endpoint: a table of every URL pattern and every operation of
the OpenAPI schema, each called as anonymous, a member of team A, a member of team B, finance
and an admin. A new endpoint fails ``test_the_table_covers_every_url_and_every_operation``
until it is given its row here.

Team A is mia's (vision); team B is sara's (search), who shares no team with mia. Every answer
to sara is checked for A's data: the name and image of A's job and the justification of A's
quota request must never appear in it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from portal.models import ApiToken
from queues.models import (
    CapabilityClass,
    GpuClass,
    JobState,
    Queue,
    QuotaRequest,
    Team,
)
from tests.factories import JobFactory, NodeFactory

PERSONAS = ("anon", "a", "b", "finance", "admin")
SECRETS = ("a-private-run", "registry.example/a-private", "a-private-justification")


@dataclass(frozen=True)
class Call:
    """One row: ``method path`` and the status each persona gets, in PERSONAS order."""

    route: str  # the URL pattern as Django's resolver writes it ("" for schema-only rows)
    method: str
    path: str  # with {job}, {token}, {request}, {node} filled in from the world
    expected: tuple[int, int, int, int, int]
    body: dict | None = None


# Pages: anonymous is sent to log in (302); admin pages answer members 403; another team's job
# or request is 404 (you cannot learn it exists).
R = 302
PAGES = [
    Call("", "GET", "/", (R, R, R, R, R)),
    Call("healthz", "GET", "/healthz", (200, 200, 200, 200, 200)),
    Call("vendor/plotly.min.js", "GET", "/vendor/plotly.min.js", (200, 200, 200, 200, 200)),
    Call("login/", "GET", "/login/", (200, 200, 200, 200, 200)),
    # Single sign-on is not configured here: its pages are not found (tests/sso/ log in).
    Call("login/sso/", "GET", "/login/sso/", (404, 404, 404, 404, 404)),
    Call("login/sso/callback", "GET", "/login/sso/callback", (404, 404, 404, 404, 404)),
    Call("logout/", "POST", "/logout/", (R, R, R, R, R)),
    Call("tokens/", "GET", "/tokens/", (R, 200, 200, 200, 200)),
    # Everyone signed in has their own notification settings; nobody sees another's.
    Call("settings/notifications/", "GET", "/settings/notifications/", (R, 200, 200, 200, 200)),
    Call(
        "settings/notifications/webhook-secret",
        "POST",
        "/settings/notifications/webhook-secret",
        (R, R, R, R, R),
    ),
    Call("tokens/<int:token_id>/revoke", "POST", "/tokens/{token}/revoke", (R, R, 404, 404, 404)),
    Call("queues/", "GET", "/queues/", (R, 200, 200, 200, 200)),
    Call("queues/<slug:name>/", "GET", "/queues/training/", (R, 200, 404, 404, 200)),
    Call("jobs/", "GET", "/jobs/", (R, 200, 200, 200, 200)),
    Call("jobs/new", "GET", "/jobs/new", (R, 200, 200, 200, 200)),
    Call("jobs/<int:job_id>/", "GET", "/jobs/{job}/", (R, 200, 404, 404, 200)),
    Call("jobs/<int:job_id>/cancel", "POST", "/jobs/{job}/cancel", (R, R, 404, 404, R)),
    Call(
        "jobs/<int:job_id>/alternatives", "GET", "/jobs/{job}/alternatives", (R, 200, 404, 404, 200)
    ),
    # The logs part asks the cluster; with none reachable it says so (200), never a 500.
    Call("jobs/<int:job_id>/logs", "GET", "/jobs/{job}/logs", (R, 200, 404, 404, 200)),
    Call("manage/", "GET", "/manage/", (R, 403, 403, 403, R)),
    Call("manage/quotas/", "GET", "/manage/quotas/", (R, 403, 403, 403, 200)),
    Call(
        "manage/quotas/<str:team>/<str:gpu_class>/",
        "GET",
        "/manage/quotas/vision/h100-80gb/",
        (R, 403, 403, 403, 200),
    ),
    Call("manage/maintenance/", "GET", "/manage/maintenance/", (R, 403, 403, 403, 200)),
    Call(
        "manage/maintenance/<str:name>/return",
        "POST",
        "/manage/maintenance/{node}/return",
        (R, 403, 403, 403, R),
    ),
    Call("manage/audit/", "GET", "/manage/audit/", (R, 403, 403, 200, 200)),
    # A team's webhook is set by admins only.
    Call("manage/team-webhooks/", "GET", "/manage/team-webhooks/", (R, 403, 403, 403, 200)),
    Call(
        "manage/team-webhooks/<str:team>/",
        "GET",
        "/manage/team-webhooks/vision/",
        (R, 403, 403, 403, 200),
    ),
    Call(
        "manage/team-webhooks/<str:team>/secret",
        "POST",
        "/manage/team-webhooks/vision/secret",
        (R, 403, 403, 403, R),
    ),
    Call("manage/policy/", "GET", "/manage/policy/", (R, 403, 403, 403, 200)),
    Call("manage/policy/export", "GET", "/manage/policy/export", (R, 403, 403, 403, 200)),
    Call("manage/policy/roles/", "GET", "/manage/policy/roles/", (R, 403, 403, 403, 200)),
    Call(
        "manage/policy/<str:section>/new",
        "GET",
        "/manage/policy/queues/new",
        (R, 403, 403, 403, 200),
    ),
    Call(
        "manage/policy/<str:section>/<str:name>/",
        "GET",
        "/manage/policy/queues/batch/",
        (R, 403, 403, 403, 200),
    ),
    Call("manage/reservations/", "GET", "/manage/reservations/", (R, 403, 403, 403, 200)),
    Call("manage/reservations/new", "GET", "/manage/reservations/new", (R, 403, 403, 403, 200)),
    Call(
        "manage/reservations/<str:name>/",
        "GET",
        "/manage/reservations/search-inference/",
        (R, 403, 403, 403, 200),
    ),
    Call(
        "manage/reservations/<str:name>/end",
        "POST",
        "/manage/reservations/search-inference/end",
        (R, 403, 403, 403, R),
    ),
    Call("manage/requests/", "GET", "/manage/requests/", (R, 403, 403, 403, 200)),
    Call(
        "manage/requests/<int:request_id>/approve",
        "POST",
        "/manage/requests/{request}/approve",
        (R, 403, 403, 403, R),
    ),
    Call(
        "manage/requests/<int:request_id>/decline",
        "POST",
        "/manage/requests/{request}/decline",
        (R, 403, 403, 403, R),
    ),
    Call("quota-requests/", "GET", "/quota-requests/", (R, 200, 200, 200, 200)),
    Call("quota-requests/new", "GET", "/quota-requests/new", (R, 200, 200, 200, 200)),
    Call(
        "quota-requests/<int:request_id>/",
        "GET",
        "/quota-requests/{request}/",
        (R, 200, 404, 404, 200),
    ),
    # A member sees their own teams' statement; finance and admins every team's; finance and
    # admins close the month.
    Call("chargeback/", "GET", "/chargeback/", (R, 200, 200, 200, 200)),
    Call("chargeback/close", "POST", "/chargeback/close", (R, 404, 404, R, R)),
    # Only an admin reopens a closed month.
    Call("chargeback/reopen", "POST", "/chargeback/reopen", (R, 404, 404, 404, R)),
    Call(
        "chargeback/teams/<str:name>/", "GET", "/chargeback/teams/vision/", (R, 200, 404, 200, 200)
    ),
    Call(
        "chargeback/jobs/<int:job_id>/", "GET", "/chargeback/jobs/{job}/", (R, 200, 404, 200, 200)
    ),
    Call("usage/", "GET", "/usage/", (R, 200, 200, 200, 200)),
    # The operations dashboard: admins, and finance may read; members never.
    Call("ops/", "GET", "/ops/", (R, 403, 403, 200, 200)),
    Call("ops/last-day", "GET", "/ops/last-day", (R, 403, 403, 200, 200)),
    # /metrics answers only the bearer token of METRICS_TOKEN, whoever is logged in.
    Call("metrics", "GET", "/metrics", (401, 401, 401, 401, 401)),
]

# The API: no credentials is 401 everywhere; another team's job is 404, never 403.
API = [
    Call("api/", "GET", "/api/", (401, 200, 200, 200, 200)),
    Call("api/schema/", "GET", "/api/schema/", (401, 200, 200, 200, 200)),
    Call("api/docs/", "GET", "/api/docs/", (401, 200, 200, 200, 200)),
    Call("api/^queues/$", "GET", "/api/queues/", (401, 200, 200, 200, 200)),
    Call(
        "api/^queues/(?P<name>[a-z0-9.-]+)/$",
        "GET",
        "/api/queues/training/",
        (401, 200, 404, 404, 200),
    ),
    Call("api/^gpu-classes/$", "GET", "/api/gpu-classes/", (401, 200, 200, 200, 200)),
    Call(
        "api/^gpu-classes/(?P<name>[a-z0-9.-]+)/$",
        "GET",
        "/api/gpu-classes/h100-80gb/",
        (401, 200, 200, 200, 200),
    ),
    Call("api/^capability-classes/$", "GET", "/api/capability-classes/", (401, 200, 200, 200, 200)),
    Call(
        "api/^capability-classes/(?P<name>[a-z0-9.-]+)/$",
        "GET",
        "/api/capability-classes/any-gpu/",
        (401, 200, 200, 200, 200),
    ),
    Call("api/^jobs/$", "GET", "/api/jobs/", (401, 200, 200, 200, 200)),
    Call(
        "api/^jobs/$",
        "POST",
        "/api/jobs/",
        (401, 201, 400, 400, 400),
        body={
            "team": "vision",
            "queue": "batch",
            "capability_class": "any-gpu",
            "image": "registry.example/x:1",
            "command": ["true"],
        },
    ),
    Call(
        "api/^jobs/batch/$",
        "POST",
        "/api/jobs/batch/",
        (401, 201, 400, 400, 400),
        body={
            "jobs": [
                {
                    "team": "vision",
                    "queue": "batch",
                    "capability_class": "any-gpu",
                    "image": "registry.example/x:1",
                    "command": ["true"],
                }
            ]
        },
    ),
    Call(
        "api/^jobs/preview/$",
        "POST",
        "/api/jobs/preview/",
        (401, 200, 400, 400, 400),
        body={
            "team": "vision",
            "queue": "batch",
            "capability_class": "any-gpu",
            "image": "registry.example/x:1",
            "command": ["true"],
        },
    ),
    Call("api/^jobs/(?P<pk>[^/.]+)/$", "GET", "/api/jobs/{job}/", (401, 200, 404, 404, 200)),
    Call(
        "api/^jobs/(?P<pk>[^/.]+)/cancel/$",
        "POST",
        "/api/jobs/{job}/cancel/",
        (401, 200, 404, 404, 200),
    ),
    Call(
        "api/^jobs/(?P<pk>[^/.]+)/events/$",
        "GET",
        "/api/jobs/{job}/events/",
        (401, 200, 404, 404, 200),
    ),
    Call(
        "api/^jobs/(?P<pk>[^/.]+)/logs/$", "GET", "/api/jobs/{job}/logs/", (401, 200, 404, 404, 200)
    ),
    # Only the job's own token: personal tokens are refused as credentials there.
    Call(
        "api/jobs/<int:pk>/checkpoint/",
        "POST",
        "/api/jobs/{job}/checkpoint/",
        (401, 401, 401, 401, 401),
    ),
    Call("api/notifications/", "GET", "/api/notifications/", (401, 200, 200, 200, 200)),
    Call(
        "api/notifications/",
        "PUT",
        "/api/notifications/",
        (401, 200, 200, 200, 200),
        body={"preferences": [{"event": "job_started", "channel": "email", "enabled": True}]},
    ),
    Call(
        "api/teams/<str:team>/webhook/",
        "GET",
        "/api/teams/vision/webhook/",
        (401, 403, 403, 403, 200),
    ),
    Call(
        "api/teams/<str:team>/webhook/",
        "PUT",
        "/api/teams/vision/webhook/",
        (401, 403, 403, 403, 200),
        body={"events": ["job_failed"]},
    ),
    Call(
        "api/teams/<str:team>/webhook/secret/",
        "POST",
        "/api/teams/vision/webhook/secret/",
        (401, 403, 403, 403, 200),
    ),
    Call("api/quotas/", "GET", "/api/quotas/", (401, 403, 403, 403, 200)),
    Call(
        "api/quotas/<slug:team>/<slug:gpu_class>/",
        "PUT",
        "/api/quotas/vision/h100-80gb/",
        (401, 403, 403, 403, 200),
        body={"nominal": "8", "borrowing_limit": "8"},
    ),
    Call("api/chargeback/", "GET", "/api/chargeback/?period={month}", (401, 200, 200, 200, 200)),
]

TABLE = PAGES + API


def _routes(patterns, prefix=""):
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route


def every_route() -> set[str]:
    """Every URL pattern but Django's own admin and DRF's ``.json``-style suffix copies."""
    return {
        route
        for route in _routes(get_resolver().url_patterns)
        if not route.startswith("admin/")
        and "(?P<format>" not in route
        and "<drf_format_suffix:format>" not in route
    }


def every_operation() -> set[tuple[str, str]]:
    """(method, path template) of every operation the OpenAPI schema documents."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }


def called(method: str, template: str) -> bool:
    """Whether some row of the table calls the operation ``method template``."""
    pattern = re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + r"(\?.*)?")
    return any(c.method == method and pattern.fullmatch(c.path) for c in API)


def test_the_table_covers_every_url_and_every_operation():
    assert every_route() - {c.route for c in TABLE} == set()
    assert {c.route for c in TABLE} - every_route() == set()
    assert {op for op in every_operation() if not called(*op)} == set()


@pytest.fixture
def world(example_policy, mia, sara, fiona, ada):
    vision = Team.objects.get(name="vision")
    job = JobFactory(
        owner=mia,
        team=vision,
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        name="a-private-run",
        image="registry.example/a-private:1",
        state=JobState.PENDING,
    )
    token, _ = ApiToken.issue(user=mia, name="a-private-token")
    request = QuotaRequest.objects.create(
        team=vision,
        gpu_class=GpuClass.objects.get(name="h100-80gb"),
        requested_by=mia,
        nominal=12,
        borrowing_limit=8,
        justification="a-private-justification",
        created_at=timezone.now() - timedelta(hours=1),
    )
    h100 = GpuClass.objects.get(name="h100-80gb")
    node = NodeFactory(name="maint-1", gpu_class=h100)
    for n in range(3):  # enough H100s for the example's quotas and reservations (28)
        NodeFactory(name=f"h100-{n}", gpu_class=h100)
    ids = {
        "job": job.pk,
        "token": token.pk,
        "request": request.pk,
        "node": node.name,
        "month": timezone.now().strftime("%Y-%m"),
    }
    return ids, {"anon": None, "a": mia, "b": sara, "finance": fiona, "admin": ada}


def call(persona_user, c: Call, ids: dict) -> tuple[int, bytes]:
    path = c.path.format(**ids)
    client = Client(raise_request_exception=False)
    headers = {}
    if persona_user is not None:
        if path.startswith("/api/") and not path.startswith(("/api/docs/", "/api/schema/")):
            _, key = ApiToken.issue(user=persona_user, name=f"table-{ApiToken.objects.count()}")
            headers["HTTP_AUTHORIZATION"] = f"Token {key}"
        else:
            client.force_login(persona_user)
    data = json.dumps(c.body) if c.body is not None else None
    response = client.generic(
        c.method, path, data or "", content_type="application/json", **headers
    )
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, content


@pytest.mark.django_db
def test_every_endpoint_answers_each_persona_as_the_table_says(world):
    ids, users = world
    wrong, leaks = [], []
    for c in TABLE:
        for persona, expected in zip(PERSONAS, c.expected, strict=True):
            cache.clear()
            # Each call on the same world: whatever it writes is rolled back afterwards.
            savepoint = transaction.savepoint()
            try:
                status, content = call(users[persona], c, ids)
            finally:
                transaction.savepoint_rollback(savepoint)
            if status != expected:
                wrong.append(
                    f"{c.method} {c.path} as {persona}: {status}, expected {expected}: "
                    f"{content[:200]!r}"
                )
            if persona == "b" and any(s.encode() in content for s in SECRETS):
                leaks.append(f"{c.method} {c.path} showed team A's data to team B")
    assert wrong == [], "\n".join(wrong)
    assert leaks == []
