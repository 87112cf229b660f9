"""Submitting a sweep in one request: ``POST /api/jobs/batch/``, all jobs or none."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queues.models import Job, JobEvent
from tests.queues.jobs.test_api import body

pytestmark = pytest.mark.django_db


def sweep(n: int, **fields) -> dict:
    return {"jobs": [body(name=f"lr-{i}", args=["--lr", f"0.{i}"], **fields) for i in range(n)]}


def test_a_member_submits_a_sweep_and_gets_every_job_back_in_order(mia, api_as):
    jobs = sweep(3)["jobs"] + [
        body(queue="interactive", team="nlp", name="probe", declared_gpu_memory_gb=8)
    ]

    response = api_as(mia).post("/api/jobs/batch/", {"jobs": jobs}, format="json")

    assert response.status_code == 201
    returned = response.json()["jobs"]
    stored = list(Job.objects.order_by("id"))
    assert [j["id"] for j in returned] == [j.pk for j in stored]
    assert [(j.name, j.args, j.team.name, j.queue.name) for j in stored] == [
        ("lr-0", ["--lr", "0.0"], "vision", "batch"),
        ("lr-1", ["--lr", "0.1"], "vision", "batch"),
        ("lr-2", ["--lr", "0.2"], "vision", "batch"),
        ("probe", [], "nlp", "interactive"),
    ]
    assert [(j["state"], j["owner"], j["runtime_limit"]) for j in returned] == [
        ("pending", "mia", "12h"),
        ("pending", "mia", "12h"),
        ("pending", "mia", "12h"),
        ("pending", "mia", "1h"),
    ]
    assert sorted(JobEvent.objects.values_list("job_id", "kind")) == [
        (j.pk, "submitted") for j in stored
    ]


def test_one_job_breaking_its_queues_terms_refuses_the_whole_batch_naming_it(mia, api_as):
    jobs = sweep(3)["jobs"]
    jobs[1]["runtime_limit"] = "4d"
    jobs[2]["team"] = "search"  # mia is not in search

    response = api_as(mia).post("/api/jobs/batch/", {"jobs": jobs}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "jobs": {
            "1": {"runtime_limit": ["4d is over queue batch's maximum of 3d"]},
            "2": {"team": ["you are not a member of team search"]},
        }
    }
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


def test_a_malformed_job_refuses_the_whole_batch_naming_its_field(mia, api_as):
    jobs = sweep(2)["jobs"]
    jobs[0]["queue"] = "nope"
    jobs[1]["command"] = "python train.py"

    response = api_as(mia).post("/api/jobs/batch/", {"jobs": jobs}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "jobs": {
            "0": {"queue": ["no queue named nope"]},
            "1": {"command": ["a list of strings, never a shell string"]},
        }
    }
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("jobs", "error"),
    [
        ([], "This list may not be empty."),
        (sweep(501)["jobs"], "Ensure this field has no more than 500 elements."),
    ],
    ids=["empty", "over 500"],
)
def test_a_batch_must_hold_1_to_500_jobs(mia, api_as, jobs, error):
    response = api_as(mia).post("/api/jobs/batch/", {"jobs": jobs}, format="json")

    assert response.status_code == 400
    assert response.json() == {"jobs": {"non_field_errors": [error]}}
    assert Job.objects.count() == 0


def test_a_batch_costs_the_same_queries_for_twenty_jobs_as_for_two(mia, api_as):
    """(Twenty: SQLite takes at most 999 parameters a statement, so a bigger batch is inserted
    in several statements there; PostgreSQL takes them all in one.)"""
    client = api_as(mia)

    def queries(n: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.post("/api/jobs/batch/", sweep(n), format="json").status_code == 201
        return len(captured)

    queries(1)  # the token's first use is written once
    assert queries(2) == queries(20)
    assert Job.objects.count() == 23


def test_a_queue_change_between_two_batches_is_seen_by_the_second(mia, api_as):
    """Names are remembered within one request body, never across requests."""
    from queues.models import Queue

    client = api_as(mia)
    twelve_hours = {"jobs": [body(runtime_limit="12h")]}
    assert client.post("/api/jobs/batch/", twelve_hours, format="json").status_code == 201
    Queue.objects.filter(name="batch").update(
        max_runtime=timedelta(hours=6), default_runtime=timedelta(hours=6)
    )

    response = client.post("/api/jobs/batch/", twelve_hours, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "jobs": {"0": {"runtime_limit": ["12h is over queue batch's maximum of 6h"]}}
    }


def test_a_batch_over_several_teams_costs_the_queries_of_one_team(mia, api_as):
    # Memberships, the queue's teams, quotas and reservations are read for the whole batch
    # at once, not team by team.
    client = api_as(mia)

    def queries(teams: list[str]) -> int:
        jobs = [body(name=f"j-{i}", team=team) for i, team in enumerate(teams)]
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/api/jobs/batch/", {"jobs": jobs}, format="json")
            assert response.status_code == 201
        return len(captured)

    queries(["vision"])  # the token's first use is written once
    # One more: the serializer looks each name up once per request body.
    assert queries(["vision", "vision"]) + 1 == queries(["vision", "nlp", "vision", "nlp"])
    assert sorted(Job.objects.values_list("team__name", flat=True)) == ["nlp"] * 2 + ["vision"] * 5


def test_a_batch_names_each_job_whose_team_the_member_is_not_in(mia, api_as):
    jobs = [body(name="a", team="nlp"), body(name="b", team="speech"), body(name="c")]

    response = api_as(mia).post("/api/jobs/batch/", {"jobs": jobs}, format="json")

    assert response.status_code == 400
    assert response.json()["jobs"] == {"1": {"team": ["you are not a member of team speech"]}}
    assert Job.objects.count() == 0
