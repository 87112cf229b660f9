"""Uncaught exceptions (``handler500``): a database that is away is a 503 with Retry-After, not a
500; under /api/ every answer is JSON."""

from __future__ import annotations

import json

import pytest
from django.db import InterfaceError, OperationalError

from portal import views


def answer(rf, path: str, exception: Exception):
    request = rf.get(path)
    try:
        raise exception
    except Exception:  # handler500 runs while the exception is being handled
        return views.error(request)


@pytest.mark.parametrize("exception", [OperationalError("server closed"), InterfaceError("gone")])
def test_a_page_whose_database_is_away_answers_503_and_says_so(rf, exception):
    response = answer(rf, "/queues/", exception)

    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert b"The database is unavailable; try again in a few seconds." in response.content


def test_the_api_whose_database_is_away_answers_503_in_json(rf):
    response = answer(rf, "/api/jobs/", OperationalError("connection refused"))

    assert (response.status_code, response["Content-Type"], response["Retry-After"]) == (
        503,
        "application/json",
        "5",
    )
    assert json.loads(response.content) == {
        "detail": "The database is unavailable; try again in a few seconds."
    }


def test_any_other_error_is_a_500_in_json_under_the_api_and_a_page_elsewhere(rf):
    api = answer(rf, "/api/jobs/", ValueError("bug"))
    page = answer(rf, "/queues/", ValueError("bug"))

    assert (api.status_code, json.loads(api.content)) == (500, {"detail": "Internal server error."})
    assert (page.status_code, page["Content-Type"]) == (500, "text/html; charset=utf-8")
