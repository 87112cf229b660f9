"""Waste per team: work lost to preemption since the last checkpoint, and failed jobs' hours."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from chargeback.selectors import waste_by_team
from queues.models import JobEvent, JobState, Team
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
