"""The month-end forecast: billed so far + running jobs to their likely ends (the estimates'
runtime prediction) + new work at the team's run rate, with a range; computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chargeback.selectors import forecast_by_team, period_report
from queues.models import JobEvent, JobState, Queue, Team
from tests.chargeback.helpers import NOV, hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

AS_OF = datetime(2026, 11, 16, tzinfo=UTC)  # 15 days left in November
NOW = datetime(2026, 12, 10, tzinfo=UTC)


def _forecast(as_of=AS_OF):
    report = period_report(month=NOV.date(), now=NOW, team_ids=None, as_of=as_of)
    return {f.team: f for f in forecast_by_team(report=report, team_ids=None)}


@pytest.fixture
def speech_job(example_policy, sam):
    """A speech batch job on one L4 (weight 1, 1.20 EUR/h), 24 h limit, running since Nov 15
    18:00 — 6 hours (7.20 EUR) by AS_OF."""
    job = JobFactory(
        team=Team.objects.get(name="speech"),
        queue=Queue.objects.get(name="batch"),
        owner=sam,
        image="train:1",
        runtime_limit=timedelta(hours=24),
        state=JobState.RUNNING,
    )
    hold(team="speech", gpu_class="l4", job=job, start=AS_OF - timedelta(hours=6), end=None)
    return job


@pytest.fixture
def sam(example_policy):
    return get_user_model().objects.get(username="sam")


def _history(sam, ratio, count=5):
    """``count`` finished batch jobs of sam's that ran ``ratio`` of a 10 h limit (no usage)."""
    for n in range(count):
        finished = AS_OF - timedelta(days=2, hours=n)
        JobFactory(
            team=Team.objects.get(name="speech"),
            queue=Queue.objects.get(name="batch"),
            owner=sam,
            image="train:1",
            runtime_limit=timedelta(hours=10),
            state=JobState.SUCCEEDED,
            started_at=finished - timedelta(hours=10) * ratio,
            finished_at=finished,
        )


def test_a_running_job_is_carried_to_its_likely_end(speech_job, sam):
    # Its queue's history: sam's jobs run half their limit, so this one is likely to end at
    # 18:00 + 12 h = 06:00: 6 more hours, 7.20 EUR. The run rate: 7.20 EUR in the one day of
    # usage there is; 15 days left → 108.00, of which the running job fills 7.20 → 100.80 new.
    _history(sam, 0.5)
    # One that ran its whole limit but finished after AS_OF is not known then.
    JobFactory(
        team=Team.objects.get(name="speech"),
        queue=Queue.objects.get(name="batch"),
        owner=sam,
        image="train:1",
        state=JobState.SUCCEEDED,
        runtime_limit=timedelta(hours=10),
        started_at=AS_OF,
        finished_at=AS_OF + timedelta(hours=10),
    )

    forecast = _forecast()["speech"]

    assert (forecast.so_far, forecast.running, forecast.new_work) == (
        D("7.20"),
        D("7.20"),
        D("100.80"),
    )
    assert (forecast.total, forecast.run_rate_per_day, forecast.running_jobs) == (
        D("115.20"),
        D("7.20"),
        1,
    )
    assert forecast.low <= forecast.total <= forecast.high


def test_without_history_a_running_job_runs_as_the_default_prior_says(speech_job):
    # No finished jobs to learn from: the estimates' default prior, 0.7 of its 24 h limit from
    # 18:00: Nov 16 10:48, 10.8 more hours, 12.96 EUR. As of Nov 16 12:00 it has run past that:
    # 0.7 of the 6 hours its limit leaves, 4.2 h, 5.04 EUR; past its limit (as of Nov 20, still
    # shown held), nothing: the limit stops it.
    assert _forecast()["speech"].running == D("12.96")
    assert _forecast(as_of=datetime(2026, 11, 16, 12, tzinfo=UTC))["speech"].running == D("5.04")
    assert _forecast(as_of=datetime(2026, 11, 20, tzinfo=UTC))["speech"].running == D("0.00")


def test_a_preempted_job_adds_nothing_more(speech_job, sam):
    _history(sam, 0.5)
    JobEvent.objects.create(job=speech_job, at=AS_OF - timedelta(minutes=1), kind="preempted")

    forecast = _forecast()["speech"]

    # Still holding its GPUs while it stops, but no more work: only the run rate remains.
    assert (forecast.running, forecast.running_jobs) == (D("0.00"), 0)
    assert (forecast.so_far, forecast.new_work, forecast.total) == (
        D("7.20"),
        D("108.00"),
        D("115.20"),
    )


def test_the_run_rate_is_the_mean_of_recent_days_with_a_range(example_policy):
    # nlp: one L4 for 10 h on Nov 13 (12.00 EUR), 2 h on Nov 14 (2.40 EUR), nothing Nov 15.
    # Three days of usage → 4.80 EUR a day; 15 days left → 72.00 EUR of new work.
    hold(
        team="nlp",
        gpu_class="l4",
        start=datetime(2026, 11, 13, tzinfo=UTC),
        end=datetime(2026, 11, 13, 10, tzinfo=UTC),
    )
    hold(
        team="nlp",
        gpu_class="l4",
        start=datetime(2026, 11, 14, tzinfo=UTC),
        end=datetime(2026, 11, 14, 2, tzinfo=UTC),
    )

    forecast = _forecast()["nlp"]

    assert (forecast.so_far, forecast.running, forecast.run_rate_per_day) == (
        D("14.40"),
        D("0.00"),
        D("4.80"),
    )
    assert (forecast.new_work, forecast.total, forecast.days_left) == (
        D("72.00"),
        D("86.40"),
        D("15.0"),
    )
    # Days varied (12.00, 2.40, 0): the range is wide, and it holds the forecast.
    assert forecast.low < forecast.total < forecast.high
    assert forecast.low >= forecast.so_far


def test_the_api_and_the_page_say_which_part_is_which(speech_job, sam, fiona, api_as):
    _history(sam, 0.5)
    params = {"period": "2026-11", "as_of": "2026-11-16T00:00:00Z"}

    data = api_as(fiona).get("/api/chargeback/", params).json()
    client = Client()
    client.force_login(fiona)
    page = client.get("/chargeback/", {"month": "2026-11", "as_of": params["as_of"]})

    [forecast] = data["forecast"]
    assert forecast | {"low": "", "high": ""} == {
        "team": "speech",
        "currency": "EUR",
        "billed_so_far": "7.20",
        "running_jobs_to_likely_end": "7.20",
        "new_work_at_run_rate": "100.80",
        "total": "115.20",
        "low": "",
        "high": "",
        "run_rate_per_day": "7.20",
        "running_jobs": 1,
        "days_left": "15.0",
    }
    html = page.content.decode()
    for heading in ("Billed so far", "Running jobs to likely end", "New work at run rate"):
        assert f'<th class="num">{heading}</th>' in html
    assert "<strong>115.20 EUR</strong>" in html


def test_no_forecast_as_of_before_the_month_began_or_after_it_ended(speech_job):
    assert _forecast(as_of=datetime(2026, 10, 20, tzinfo=UTC)) == {}
    assert _forecast(as_of=datetime(2026, 12, 1, tzinfo=UTC)) == {}
