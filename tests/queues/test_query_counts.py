"""The member's pages cost the same number of queries with 10 rows as with 100."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queues.models import CapabilityClass, EventKind, GpuClass, JobEvent, Node, Queue, Team
from tests.chargeback.helpers import hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, path
    return len(captured)


def grow(mia, rows: int) -> int:
    """Add ``rows`` of everything the pages list; return the id of a job with ``rows`` events."""
    vision = Team.objects.get(name="vision")
    batch = Queue.objects.get(name="batch")
    any_gpu = CapabilityClass.objects.get(name="any-gpu")
    a100 = GpuClass.objects.get(name="a100-80gb")
    now = timezone.now()
    jobs = []
    for n in range(rows):
        job = JobFactory(
            owner=mia,
            team=vision,
            queue=batch,
            capability_class=any_gpu,
            state="pending",
            position=n + 1,
            queue_length=rows,
            pending_reasons=[{"code": "Priority", "message": "behind", "details": {}, "hint": ""}],
        )
        admitted = JobFactory(
            owner=mia,
            team=vision,
            queue=batch,
            capability_class=any_gpu,
            state="succeeded",
            gpu_class=a100,
            submitted_at=now - timedelta(minutes=30 + n),
            admitted_at=now - timedelta(minutes=n),
        )
        hold(
            team=vision,
            gpu_class="a100-80gb",
            job=admitted,
            # on 5 days whatever the rows: the usage page's forecast costs one statement per
            # day with usage in the last 21 (bounded by days, not rows)
            start=now - timedelta(days=n % 5, hours=2),
            end=now - timedelta(days=n % 5),
        )
        jobs.append(job)
    JobEvent.objects.bulk_create(
        JobEvent(job=jobs[0], at=now, kind=EventKind.STARTED, message="ran") for _ in range(rows)
    )
    return jobs[0].pk


@pytest.mark.parametrize(
    "path",
    ["/queues/", "/queues/batch/", "/jobs/", "/jobs/new", "/jobs/{job}/", "/usage/"],
)
def test_a_member_page_costs_the_same_queries_for_10_and_100_rows(example_policy, mia, path):
    Node.objects.create(
        name="a100-1", gpu_class=GpuClass.objects.get(name="a100-80gb"), gpu_count=8
    )
    client = Client()
    client.force_login(mia)
    job = grow(mia, 10)
    few = queries(client, path.format(job=job))
    job = grow(mia, 90)

    assert queries(client, path.format(job=job)) == few
