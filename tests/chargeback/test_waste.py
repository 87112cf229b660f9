"""Waste per team: work lost to preemption since the last checkpoint, and failed jobs' hours."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.test import Client

from chargeback.selectors import waste_by_team, waste_lines
from queues.models import JobEvent, JobState, Queue, SharingMode, Team
from tests.chargeback.helpers import DEC, NOV, hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_a_preempted_jobs_waste_and_a_failed_jobs_hours(example_policy):
    nlp = Team.objects.get(name="nlp")
    preempted = JobFactory(team=nlp, pods=1, state=JobState.PENDING)
    hold(
        team=nlp,
        gpu_class="h100-80gb",
        devices=2,
        job=preempted,
        start=datetime(2026, 11, 5, 8, tzinfo=UTC),
        end=datetime(2026, 11, 5, 12, tzinfo=UTC),
    )
    # Preempted at 12:00, 90 minutes after its last checkpoint, its pods gone at once:
    # 1.5 h × 2 GPUs = 3 GPU-hours.
    JobEvent.objects.create(
        job=preempted, at=datetime(2026, 11, 5, 10, 30, tzinfo=UTC), kind="checkpoint"
    )
    JobEvent.objects.create(
        job=preempted,
        at=datetime(2026, 11, 5, 12, tzinfo=UTC),
        kind="preempted",
        details={"lost_work_seconds": 5400},
    )
    failed = JobFactory(team=nlp, state=JobState.FAILED)
    # A failed job held one L4 for 4 hours: 4 GPU-hours.
    hold(
        team=nlp,
        gpu_class="l4",
        job=failed,
        start=datetime(2026, 11, 6, tzinfo=UTC),
        end=datetime(2026, 11, 6, 4, tzinfo=UTC),
    )

    [waste] = waste_by_team(start=NOV, end=DEC, now=DEC, team_ids=None)

    assert (waste.team, waste.preempted_gpu_hours, waste.failed_gpu_hours) == (
        "nlp",
        Decimal("3.000"),
        Decimal("4.000"),
    )
    assert waste_by_team(start=NOV, end=DEC, now=DEC, team_ids=[]) == []


T0 = datetime(2026, 11, 12, 9, tzinfo=UTC)


def _job(team, queue_name, state=JobState.SUCCEEDED):
    return JobFactory(
        team=Team.objects.get(name=team), queue=Queue.objects.get(name=queue_name), state=state
    )


def test_a_preemption_loses_everything_since_the_start_plus_the_stopping_grace(example_policy):
    # Ran 11 minutes on 8 H100s with no checkpoint, preempted, held its GPUs 10 more minutes
    # while stopping: (11 + 10) / 60 × 8 = 2.8 GPU-hours lost.
    job = _job("vision", "training")
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=8,
        job=job,
        start=T0,
        end=T0 + timedelta(minutes=21),
    )
    JobEvent.objects.create(job=job, at=T0 + timedelta(minutes=11), kind="preempted")

    [line] = waste_lines(start=NOV, end=DEC, now=DEC, team_ids=None)

    assert (line.team, line.queue, line.gpu_class) == ("vision", "training", "h100-80gb")
    assert line.preempted_gpu_hours == Decimal("2.800")
    assert (line.drained_gpu_hours, line.failed_gpu_hours) == (Decimal("0.000"), Decimal("0.000"))
    assert line.idle_gpu_hours is None  # no Prometheus: not measured, never shown as 0


def test_a_drain_loses_the_work_since_the_last_checkpoint_plus_the_grace(example_policy):
    # 4 A100s from T0; checkpoint at minute 5; drained (preempted for maintenance) at minute 30;
    # the pod let go at minute 31: (31 − 5) / 60 × 4 = 1.733 GPU-hours. A checkpoint of an
    # earlier run (before this pod started) does not count.
    job = _job("nlp", "batch")
    JobEvent.objects.create(job=job, at=T0 - timedelta(hours=2), kind="checkpoint")
    hold(
        team="nlp",
        gpu_class="a100-80gb",
        devices=4,
        job=job,
        start=T0,
        end=T0 + timedelta(minutes=31),
    )
    JobEvent.objects.create(job=job, at=T0 + timedelta(minutes=5), kind="checkpoint")
    JobEvent.objects.create(job=job, at=T0 + timedelta(minutes=40), kind="checkpoint")  # later
    JobEvent.objects.create(
        job=job,
        at=T0 + timedelta(minutes=30),
        kind="preempted",
        details={"maintenance_nodes": ["a100-01"]},
    )

    [line] = waste_lines(start=NOV, end=DEC, now=DEC, team_ids=None)

    assert (line.team, line.queue, line.gpu_class) == ("nlp", "batch", "a100-80gb")
    assert (line.preempted_gpu_hours, line.drained_gpu_hours) == (
        Decimal("0.000"),
        Decimal("1.733"),
    )


def test_waste_of_a_gang_counts_every_pod_and_a_mig_slice_its_share(example_policy):
    # Two pods of 2 H100s each, preempted 30 minutes in and gone at once: 0.5 × 4 = 2 GPU-h.
    # A 1g.10gb slice (1/7), preempted after 70 minutes, gone 7 minutes later: 77/60/7 = 0.183.
    gang = _job("nlp", "training")
    for _ in range(2):
        hold(
            team="nlp",
            gpu_class="h100-80gb",
            devices=2,
            job=gang,
            start=T0,
            end=T0 + timedelta(minutes=30),
        )
    JobEvent.objects.create(job=gang, at=T0 + timedelta(minutes=30), kind="preempted")
    slice_job = _job("nlp", "interactive-mig")
    hold(
        team="nlp",
        gpu_class="a100-80gb",
        share=Fraction(1, 7),
        mode=SharingMode.MIG,
        job=slice_job,
        start=T0,
        end=T0 + timedelta(minutes=77),
    )
    JobEvent.objects.create(job=slice_job, at=T0 + timedelta(minutes=70), kind="preempted")

    lines = waste_lines(start=NOV, end=DEC, now=DEC, team_ids=None)

    assert [(w.queue, w.gpu_class, w.preempted_gpu_hours) for w in lines] == [
        ("interactive-mig", "a100-80gb", Decimal("0.183")),
        ("training", "h100-80gb", Decimal("2.000")),
    ]
    [team] = waste_by_team(start=NOV, end=DEC, now=DEC, team_ids=None)
    assert team.preempted_gpu_hours == Decimal("2.183")  # the sum of the rounded lines


def test_waste_is_in_the_statement_csv_and_api(example_policy, fiona, api_as):
    job = _job("vision", "training")
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=8,
        job=job,
        start=T0,
        end=T0 + timedelta(minutes=21),
    )
    JobEvent.objects.create(job=job, at=T0 + timedelta(minutes=11), kind="preempted")
    failed = _job("speech", "batch", state=JobState.FAILED)
    hold(
        team="speech",
        gpu_class="l4",
        devices=2,
        job=failed,
        start=T0,
        end=T0 + timedelta(hours=3),
    )
    client = Client()
    client.force_login(fiona)

    data = api_as(fiona).get("/api/chargeback/", {"period": "2026-11"}).json()
    page = client.get("/chargeback/", {"month": "2026-11"})
    exported = list(
        csv.DictReader(
            io.StringIO(
                client.get("/chargeback/", {"month": "2026-11", "format": "csv"}).content.decode()
            )
        )
    )

    assert data["waste"] == [
        {
            "team": "speech",
            "queue": "batch",
            "gpu_class": "l4",
            "preempted_gpu_hours": "0.000",
            "drained_gpu_hours": "0.000",
            "failed_gpu_hours": "6.000",
            "idle_gpu_hours": None,
        },
        {
            "team": "vision",
            "queue": "training",
            "gpu_class": "h100-80gb",
            "preempted_gpu_hours": "2.800",
            "drained_gpu_hours": "0.000",
            "failed_gpu_hours": "0.000",
            "idle_gpu_hours": None,
        },
    ]
    assert data["waste_totals"]["preempted_gpu_hours"] == "2.800"
    assert data["waste_totals"]["failed_gpu_hours"] == "6.000"
    waste_rows = [(r["kind"], r["team"], r["queue"], r["gpu_class"]) for r in exported[-3:]]
    assert waste_rows == [
        ("waste", "speech", "batch", "l4"),
        ("waste", "vision", "training", "h100-80gb"),
        ("waste total", "", "", ""),
    ]
    assert [r["preempted_gpu_hours"] for r in exported[-3:]] == ["0.000", "2.800", "2.800"]
    html = page.content.decode()
    assert 'data-testid="waste-preempted">2.800<' in html
    assert 'data-testid="waste-failed">6.000<' in html


def test_a_preemption_just_before_the_month_ends_loses_its_grace_in_that_month(example_policy):
    # Preempted at Nov 30 23:55 after 55 minutes without a checkpoint, 1 H100 let go at Dec 1
    # 00:05: (55 + 10) / 60 = 1.083 GPU-hours, all November's; December's waste has none.
    job = _job("vision", "training")
    start = datetime(2026, 11, 30, 23, tzinfo=UTC)
    hold(
        team="vision",
        gpu_class="h100-80gb",
        job=job,
        start=start,
        end=start + timedelta(minutes=65),
    )
    JobEvent.objects.create(job=job, at=start + timedelta(minutes=55), kind="preempted")
    after = datetime(2026, 12, 3, tzinfo=UTC)

    [november] = waste_lines(start=NOV, end=DEC, now=after, team_ids=None)
    december = waste_lines(
        start=DEC, end=datetime(2027, 1, 1, tzinfo=UTC), now=after, team_ids=None
    )

    assert november.preempted_gpu_hours == Decimal("1.083")
    assert december == []
