"""Reservations from the pages: the policy service's refusals with the numbers, who is affected
before saving (the engine's what-if), ending, the timeline."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from queues.models import CapabilityClass, Job, Queue, Reservation, Team
from queues.operations.selectors import reservation_impact, reservation_timelines
from queues.operations.services import quota_update, reservation_end, reservation_save
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

WINDOW = {"starts_at": "2027-01-10T00:00", "ends_at": "2027-01-12T00:00"}


def form(**fields):
    return {
        "name": "vision-demo",
        "team": "vision",
        "gpu_class": "h100-80gb",
        "amount": "12",
        **WINDOW,
        **fields,
    }


def test_a_reservation_is_checked_then_saved_and_audited(client, ada, h100_nodes):
    client.force_login(ada)

    checked = client.post("/manage/reservations/new", form())
    assert checked.status_code == 200
    assert checked.context["impact"].nobody
    assert not Reservation.objects.filter(name="vision-demo").exists()

    confirm = checked.context["fingerprint"]
    changed = client.post("/manage/reservations/new", {**form(amount="11"), "confirm": confirm})
    assert changed.status_code == 200  # changed after the check: checked again, not saved
    assert not Reservation.objects.filter(name="vision-demo").exists()
    saved = client.post("/manage/reservations/new", {**form(), "confirm": confirm})
    assert saved["Location"] == "/manage/reservations/"
    r = Reservation.objects.get(name="vision-demo")
    assert (r.team.name, r.gpu_class.name, r.amount, r.starts_at, r.ends_at) == (
        "vision",
        "h100-80gb",
        Decimal("12.000"),
        datetime(2027, 1, 10, tzinfo=UTC),
        datetime(2027, 1, 12, tzinfo=UTC),
    )
    (entry,) = LogEntry.objects.get_for_object(r)
    assert (entry.actor, entry.additional_data, entry.action) == (ada, {"source": "page"}, 0)


def test_a_reservation_beyond_the_class_in_its_window_is_refused_with_the_numbers(
    client, ada, h100_nodes
):
    client.force_login(ada)

    response = client.post("/manage/reservations/new", {**form(amount="13"), "confirm": "1"})

    assert response.status_code == 422
    assert response.context["problems"] == [
        "gpu_classes[h100-80gb]: quotas (20) plus reservations (21 at 2027-01-11T08:00:00Z) "
        "promise 41 GPUs, but the cluster has 40 on 5 healthy node(s)"
    ]
    assert not Reservation.objects.filter(name="vision-demo").exists()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"ends_at": ""}, "ends_at", "a window needs a start and an end (both empty: standing)"),
        ({"ends_at": "2027-01-09T00:00"}, "ends_at", "must be after the start"),
        ({"amount": "0"}, "amount", "Ensure this value is greater than or equal to 0.001."),
        ({"name": "Bad Name"}, "name", "Use lowercase letters"),
        ({"team": "ghost"}, "team", "Select a valid choice."),
    ],
)
def test_bad_reservation_input_names_the_field(client, ada, h100_nodes, fields, field, message):
    client.force_login(ada)
    response = client.post("/manage/reservations/new", {**form(**fields), "confirm": "1"})
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert errors[field][0].startswith(message)
    assert not Reservation.objects.filter(name="vision-demo").exists()


def test_the_what_if_names_pending_work_that_would_wait_longer(mia, h100_nodes):
    for team in ("nlp", "research"):
        quota_update(
            team=team, gpu_class="h100-80gb", nominal=Decimal(0), borrowing_limit=Decimal(0)
        )
    quota_update(
        team="vision", gpu_class="h100-80gb", nominal=Decimal(8), borrowing_limit=Decimal(16)
    )
    job = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="training"),
        capability_class=CapabilityClass.objects.get(name="bf16-large"),
        pods=4,
        gpus_per_pod=5,
    )

    impact = reservation_impact(
        name="nlp-standing",
        fields={
            "team": "nlp",
            "queue": None,
            "gpu_class": "h100-80gb",
            "amount": Decimal(24),
            "starts_at": None,
            "ends_at": None,
        },
        now=timezone.now(),
    )

    assert impact.preempted == []
    assert [(a.job_id, a.team, a.before) for a in impact.waits_longer] == [
        (job.pk, "vision", "starts now")
    ]
    # As reasons say a time (it printed 2026-12-05T14:00:00Z)
    assert re.fullmatch(
        r"starts \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC|starts at an unknown time.*",
        impact.waits_longer[0].after,
    ), impact.waits_longer[0].after
    assert Job.objects.get(pk=job.pk).state == "pending"  # a what-if writes nothing


def test_ending_a_reservation_that_began_ends_it_now_and_one_not_begun_is_removed(h100_nodes):
    now = timezone.now()
    reservation_save(
        name="running-one",
        fields={
            "team": "vision",
            "queue": None,
            "gpu_class": "h100-80gb",
            "amount": Decimal(2),
            "starts_at": now - timedelta(hours=1),
            "ends_at": now + timedelta(days=1),
        },
    )
    reservation_end(name="running-one", now=now)
    r = Reservation.objects.get(name="running-one")
    assert r.ends_at is not None and abs((r.ends_at - now).total_seconds()) < 1

    reservation_end(name="nlp-conference-run", now=now)
    assert not Reservation.objects.filter(name="nlp-conference-run", active=True).exists()


def test_the_timeline_steps_with_the_reservations(h100_nodes):
    now = datetime(2027, 1, 1, tzinfo=UTC)
    (h100,) = [t for t in reservation_timelines(now=now) if t.gpu_class == "h100-80gb"]
    assert h100.times == [
        now,
        datetime(2027, 1, 11, 8, tzinfo=UTC),
        datetime(2027, 1, 13, 8, tzinfo=UTC),
        now + timedelta(weeks=8),
    ]
    assert h100.reserved == [Decimal(0), Decimal(8), Decimal(0), Decimal(0)]
    assert (h100.capacity, h100.quotas, h100.peak) == (40, Decimal(20), Decimal(8))


def test_the_reservations_page_loads_plotly_from_the_installed_package(client, ada, h100_nodes):
    client.force_login(ada)
    page = client.get("/manage/reservations/").content.decode()
    assert '<script src="/vendor/plotly.min.js?v=' in page
    assert "cdn" not in page.lower()
    assert 'id="timeline-h100-80gb"' in page
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200
    assert js["Cache-Control"] == "public, max-age=31536000, immutable"
