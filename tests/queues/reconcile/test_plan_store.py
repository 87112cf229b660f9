"""Storing the waiting jobs' reasons, positions and estimates: one statement for all of them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queues.models import CapabilityClass, Job, JobState, Queue, Team
from queues.reconcile.plan import pending_rows_update
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
FIELDS = ["pending_reasons", "estimated_start", "estimated_start_note", "position"]


def waiting(owner, name: str, state: str = JobState.PENDING) -> Job:
    return JobFactory(
        owner=owner,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        name=name,
        state=state,
    )


def test_it_writes_every_waiting_jobs_values_and_leaves_a_job_that_left_the_queue(mia):
    first, second = waiting(mia, "first"), waiting(mia, "second")
    cancelled = waiting(mia, "gone", state=JobState.CANCELLED)
    at = datetime(2026, 12, 3, 18, 30, 15, 250000, tzinfo=UTC)
    reason = {"code": "QuotaExceeded", "message": "8/8 used", "details": {"gpu_class": "l4"}}
    rows = {
        job.pk: {
            "pending_reasons": [reason],
            "estimated_start": at,
            "estimated_start_note": f"note {position}",
            "position": position,
        }
        for position, job in enumerate([first, second, cancelled], start=1)
    }

    with CaptureQueriesContext(connection) as captured:
        pending_rows_update(rows, FIELDS)

    stored = {j.name: j for j in Job.objects.all()}
    assert [
        (stored[n].pending_reasons, stored[n].estimated_start, stored[n].position)
        for n in ("first", "second")
    ] == [([reason], at, 1), ([reason], at, 2)]
    assert (stored["second"].estimated_start_note, stored["gone"].position) == ("note 2", None)
    assert stored["gone"].pending_reasons == []
    # One statement on PostgreSQL, one statement run for every row elsewhere (SQLite).
    updates = [q for q in captured if "UPDATE" in q["sql"]]
    assert len(updates) == 1


def test_a_waiting_jobs_bound_is_stored_kept_never_earlier_while_ahead(mia):
    from datetime import timedelta

    from queues import admission as engine
    from queues.reconcile.plan import pending_reasons_store

    job = waiting(mia, "kept")
    now = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)
    reason = engine.PendingReason(engine.ReasonCode.INSUFFICIENT_CAPACITY, "needs 8; 0 free")

    def store(at: datetime, when: datetime) -> datetime | None:
        status = engine.PendingStatus(
            job_id=job.pk,
            reasons=(reason,),
            estimated_start=engine.EstimatedStart(at=at, likely=at - timedelta(minutes=5)),
            position=1,
            queue_length=1,
        )
        pending_reasons_store(
            engine.Plan(now=when, admissions=(), preemptions=(), pending=(status,)), now=when
        )
        job.refresh_from_db()
        return job.estimated_start

    assert store(now + timedelta(minutes=40), now) == now + timedelta(minutes=40)
    # jobs ended early: the plan's bound is earlier, the one shown is kept; likely moves
    assert store(now + timedelta(minutes=25), now + timedelta(minutes=1)) == (
        now + timedelta(minutes=40)
    )
    assert job.likely_start == now + timedelta(minutes=20)
    # later is shown at once
    assert store(now + timedelta(minutes=50), now + timedelta(minutes=2)) == (
        now + timedelta(minutes=50)
    )
    # once the bound shown has passed, the plan's own
    assert store(now + timedelta(minutes=55), now + timedelta(minutes=51)) == (
        now + timedelta(minutes=55)
    )


def test_a_projected_start_is_shown_as_it_comes_never_kept_like_a_bound(mia):
    # Deep in a long queue the start is projected (queues/admission/projection.py): no bound,
    # so an earlier one replaces it, and the note goes with the time it belongs to.
    from datetime import timedelta

    from queues import admission as engine
    from queues.reconcile.plan import pending_reasons_store

    job = waiting(mia, "projected")
    now = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)
    reason = engine.PendingReason(engine.ReasonCode.INSUFFICIENT_CAPACITY, "needs 8; 0 free")

    def store(at: datetime, when: datetime, *, projected: bool) -> tuple[datetime | None, str]:
        estimate = engine.EstimatedStart(at=at, likely=at, projected=projected)
        status = engine.PendingStatus(
            job_id=job.pk, reasons=(reason,), estimated_start=estimate, position=1, queue_length=1
        )
        pending_reasons_store(
            engine.Plan(now=when, admissions=(), preemptions=(), pending=(status,)), now=when
        )
        job.refresh_from_db()
        return job.estimated_start, job.estimated_start_note

    shown = store(now + timedelta(hours=47), now, projected=True)
    assert shown == (now + timedelta(hours=47), engine.PROJECTED_NOTE)
    # the next plan simulates it: its bound is shown, without the note
    assert store(now + timedelta(hours=1), now + timedelta(minutes=1), projected=False) == (
        now + timedelta(hours=1),
        "",
    )
    # a simulated bound is kept; a projection after it is shown as it comes, with its note
    assert store(now + timedelta(minutes=50), now + timedelta(minutes=2), projected=False) == (
        now + timedelta(hours=1),
        "",
    )
    assert store(now + timedelta(minutes=40), now + timedelta(minutes=3), projected=True) == (
        now + timedelta(minutes=40),
        engine.PROJECTED_NOTE,
    )
