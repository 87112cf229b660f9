"""A job pass's state changes written together: one statement per step for all jobs, each job
moved only from the state it was read in, and a second change only after the first."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from queues.models import CapabilityClass, EventKind, Job, JobEvent, JobState, Queue, Team
from queues.reconcile.facts import CycleReport
from queues.reconcile.jobs import job_moves, job_transition
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 12, 5, 2, 30, 0, 500000, tzinfo=UTC)
STARTED = datetime(2026, 12, 5, 2, 29, 58, tzinfo=UTC)
ENDED = datetime(2026, 12, 5, 2, 29, 59, tzinfo=UTC)


def admitted(owner, name: str) -> Job:
    job = JobFactory(
        owner=owner,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        name=name,
        state=JobState.ADMITTED,
        not_before=NOW,
        rollbacks=2,
    )
    return Job.objects.get(pk=job.pk)  # as a pass reads it


def start(job: Job, report: CycleReport) -> bool:
    return job_transition(
        job,
        to=JobState.RUNNING,
        kind=EventKind.STARTED,
        now=NOW,
        message="1 pod(s) running on gpu-0",
        started_at=STARTED,
        pending_reasons=[],
        rollbacks=0,
        not_before=None,
        counted=(report, "admitted→running"),
    )


def succeed(job: Job, report: CycleReport) -> bool:
    return job_transition(
        job,
        to=JobState.SUCCEEDED,
        kind=EventKind.SUCCEEDED,
        now=NOW,
        message="all pods completed",
        finished_at=ENDED,
        exit_code=0,
        counted=(report, "running→succeeded"),
    )


def test_a_pass_moves_each_job_once_from_the_state_it_was_read_in(mia):
    short, long, cancelled = admitted(mia, "short"), admitted(mia, "long"), admitted(mia, "gone")
    report = CycleReport()

    with CaptureQueriesContext(connection) as captured, transaction.atomic(), job_moves():
        # its owner cancels it after the pass read it
        Job.objects.filter(pk=cancelled.pk).update(state=JobState.CANCELLED)
        start(short, report)
        succeed(short, report)  # started and ended between two cycles
        start(long, report)
        start(cancelled, report)
        succeed(cancelled, report)

    stored = {j.name: j for j in Job.objects.all()}
    assert [
        (n, stored[n].state, stored[n].started_at, stored[n].finished_at, stored[n].exit_code)
        for n in ("short", "long", "gone")
    ] == [
        ("short", JobState.SUCCEEDED, STARTED, ENDED, 0),
        ("long", JobState.RUNNING, STARTED, None, None),
        ("gone", JobState.CANCELLED, None, None, None),
    ]
    assert [(stored[n].rollbacks, stored[n].not_before) for n in ("short", "gone")] == [
        (0, None),
        (2, NOW),
    ]
    events = list(JobEvent.objects.order_by("job_id", "id").values_list("job__name", "kind", "at"))
    assert events == [
        ("short", EventKind.STARTED, NOW),
        ("short", EventKind.SUCCEEDED, NOW),
        ("long", EventKind.STARTED, NOW),
    ]
    assert dict(report.transitions) == {"admitted→running": 2, "running→succeeded": 1}
    if connection.vendor == "postgresql":
        # one statement per step for every job, not one per job
        updates = [
            q for q in captured if q["sql"].startswith("UPDATE") and "queues_job" in q["sql"]
        ]
        assert len(updates) == 3  # the cancel, then the starts, then the ends


def test_outside_a_pass_a_change_is_written_at_once(mia):
    job = admitted(mia, "alone")
    stale = Job.objects.get(pk=job.pk)
    report = CycleReport()

    assert start(job, report) is True
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert start(stale, report) is False  # read as admitted, moved since: not again
    assert dict(report.transitions) == {"admitted→running": 1}
    assert JobEvent.objects.filter(job=job).count() == 1
