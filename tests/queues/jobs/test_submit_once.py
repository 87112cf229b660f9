"""A submission sent twice stores its jobs once: the form's one-time key (Back, then Submit made a
second copy of the job) and the API's ``Idempotency-Key`` (a script retrying after a time-out)."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import connection
from django.test import Client

from queues.models import Job, SubmissionKey
from tests.queues.jobs.test_api import body
from tests.queues.jobs.test_request_rules import GOOD, as_form

pytestmark = pytest.mark.django_db


def test_a_retried_api_submission_returns_the_first_job(mia, api_as):
    api = api_as(mia)

    first = api.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="retry-1")
    again = api.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="retry-1")

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Job.objects.count() == 1


def test_without_a_key_or_with_another_each_post_is_a_new_job(mia, api_as):
    api = api_as(mia)

    api.post("/api/jobs/", body(), format="json")
    api.post("/api/jobs/", body(), format="json")
    api.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="a")
    api.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="b")

    assert Job.objects.count() == 4


def test_a_key_is_the_owners_alone(mia, sara, api_as):
    # Two people's scripts may pick the same key: each gets a job of their own.
    mine = api_as(mia).post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="nightly")
    theirs = api_as(sara).post(
        "/api/jobs/", body(team="search"), format="json", HTTP_IDEMPOTENCY_KEY="nightly"
    )

    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.json()
    assert mine.json()["id"] != theirs.json()["id"]


def test_a_key_sent_with_another_body_is_422_and_stores_nothing(mia, api_as):
    api = api_as(mia)
    api.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="k1")

    other = api.post("/api/jobs/", body(pods=2), format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert other.status_code == 422
    assert other.json() == {
        "detail": "the key 'k1' was used for a different submission in the last 24 hours: "
        "send a new key for a new submission"
    }
    assert Job.objects.count() == 1


@pytest.mark.parametrize("key", ["", "a b", "x" * 256, "naïve"])
def test_a_malformed_key_is_400_naming_the_header(mia, api_as, key):
    response = api_as(mia).post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY=key)

    assert response.status_code == 400
    assert response.json() == {
        "Idempotency-Key": ["must be 1 to 255 printable ASCII characters without spaces"]
    }
    assert Job.objects.count() == 0


def test_a_refused_submission_keeps_no_key_so_the_fixed_one_goes_through(mia, api_as):
    api = api_as(mia)

    refused = api.post("/api/jobs/", body(pods=0), format="json", HTTP_IDEMPOTENCY_KEY="fix-me")
    fixed = api.post("/api/jobs/", body(pods=0), format="json", HTTP_IDEMPOTENCY_KEY="fix-me")

    assert (refused.status_code, fixed.status_code) == (400, 400)
    assert SubmissionKey.objects.count() == 0


def test_a_retried_batch_returns_the_first_batchs_jobs(mia, api_as):
    api = api_as(mia)
    sweep = {"jobs": [body(name="lr-1"), body(name="lr-2")]}

    first = api.post("/api/jobs/batch/", sweep, format="json", HTTP_IDEMPOTENCY_KEY="sweep-7")
    again = api.post("/api/jobs/batch/", sweep, format="json", HTTP_IDEMPOTENCY_KEY="sweep-7")

    assert (first.status_code, again.status_code) == (201, 201)
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_repeats_sent_at_the_same_moment_store_one_job(mia, api_as):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serializes writers whole; the row lock is PostgreSQL's (CI runs it)")
    results: list[int] = []
    clients = [api_as(mia) for _ in range(4)]

    def send(client) -> None:
        try:
            response = client.post("/api/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="race")
            results.append(response.json()["id"])
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 4 and len(set(results)) == 1
    assert Job.objects.count() == 1


def test_back_then_submit_on_the_form_shows_the_first_job_instead_of_a_copy(mia):
    client = Client()
    client.force_login(mia)
    page = client.get("/jobs/new").content.decode()
    key = re.search(r'name="submission_key" value="([0-9a-f]{32})"', page).group(1)
    form = {**as_form(GOOD), "submission_key": key}

    first = client.post("/jobs/new", form)
    # The browser's Back shows the same form, its key with it; Submit sends it again.
    again = client.post("/jobs/new", form, follow=True)

    job = Job.objects.get()
    assert first["Location"] == f"/jobs/{job.pk}/"
    assert again.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert (
        f"This form was submitted already: it made job {job.pk}, shown here. "
        "Nothing new was submitted." in again.content.decode()
    )


def test_the_same_form_changed_before_submitting_again_is_a_new_job(mia):
    client = Client()
    client.force_login(mia)
    key = "0123456789abcdef0123456789abcdef"

    client.post("/jobs/new", {**as_form(GOOD), "submission_key": key})
    client.post("/jobs/new", {**as_form({**GOOD, "name": "second-try"}), "submission_key": key})

    assert sorted(Job.objects.values_list("name", flat=True)) == ["", "second-try"]


def test_each_form_the_page_hands_out_has_a_key_of_its_own(mia):
    client = Client()
    client.force_login(mia)

    keys = {
        re.search(
            r'name="submission_key" value="([0-9a-f]{32})"',
            client.get("/jobs/new").content.decode(),
        ).group(1)
        for _ in range(3)
    }

    assert len(keys) == 3
