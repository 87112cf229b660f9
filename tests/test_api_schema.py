"""The API answers as its OpenAPI schema says, for generated requests (schemathesis, in-process)."""

from __future__ import annotations

import json

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from rest_framework.throttling import SimpleRateThrottle

from portal.models import ApiToken
from portal.wsgi import application


def openapi_schema() -> dict:
    """The schema /api/schema/ serves, generated in-process (serving it needs credentials)."""
    generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(generated))


schema = schemathesis.openapi.from_dict(openapi_schema())
schema.app = application


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    # Django closes the database connection when a request finishes; its own test client turns
    # that off so a test's transaction survives, and calls through WSGI here need the same.
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def rates_above_the_examples(monkeypatch):
    # Hypothesis sends more requests a minute than a person may: 429 is documented, but here
    # every example should reach the endpoint (tests/portal/test_limits.py tests the rates).
    for scope in ("user", "preview"):
        monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, scope, "100000/min")


@pytest.fixture
def token(mia) -> str:
    _, key = ApiToken.issue(user=mia, name="schemathesis")
    return key


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_the_schema(case, token):
    case.call_and_validate(headers={"Authorization": f"Token {token}"})
