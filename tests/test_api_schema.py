"""The API answers as its OpenAPI schema says, for generated requests (schemathesis, in-process)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from portal.models import ApiToken
from portal.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


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


@pytest.fixture
def token(mia) -> str:
    _, key = ApiToken.issue(user=mia, name="schemathesis")
    return key


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_matches_the_schema(case, token):
    case.call_and_validate(headers={"Authorization": f"Token {token}"})
