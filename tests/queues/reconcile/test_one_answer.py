"""One job, one moment, one answer (issue 28): the preview before submitting, the job page and
the queue page after the reconcile planned it give the same estimated start. Testers saw a
preview say "08:37 (in 24 min)" and the job page, right after, "unknown"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.template.loader import render_to_string
from django.test import Client

from queues.cluster.adapter import Cluster
from queues.jobs.preview import job_preview
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, JobState, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.browser.test_member_day import SMALL_CLUSTER

pytestmark = pytest.mark.django_db


def request(owner, *, gpus: int, limit: timedelta) -> JobRequest:
    return JobRequest(
        owner=owner,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        image="registry.example/train:1",
        command=["python", "train.py"],
        gpus_per_pod=gpus,
        runtime_limit=limit,
        checkpoint_interval=timedelta(minutes=30),
        env={"SIM_DURATION_SECONDS": "3000"},
    )


ESTIMATE = re.compile(
    r'<span class="estimate" data-testid="estimate" data-at="([^"]+)" data-likely="([^"]+)">'
)


def shown(html: str) -> list[tuple[str, str]]:
    """Each estimate a page shows: (at the latest, likely), as the shared snippet marks them."""
    return ESTIMATE.findall(html)


def test_the_preview_the_job_page_and_the_queue_page_agree(
    sim_cluster_factory, example_policy, mia
):
    sim = sim_cluster_factory(nodes=SMALL_CLUSTER)  # one A100 node of 4 GPUs
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    try:
        running = job_submit(request=request(mia, gpus=4, limit=timedelta(hours=1)))
        for _ in range(3):
            reconcile_cycle(cluster=adapter, now=sim.now())
            sim.advance(10)
        running.refresh_from_db()
        assert running.state == JobState.RUNNING
        now = sim.now()

        preview = job_preview(request=request(mia, gpus=2, limit=timedelta(hours=2)), now=now)
        job = job_submit(request=request(mia, gpus=2, limit=timedelta(hours=2)))
        reconcile_cycle(cluster=adapter, now=now)
    finally:
        adapter.close()
    job.refresh_from_db()

    assert not preview.starts_now and preview.estimated_start is not None
    assert job.state == JobState.PENDING
    # the running job may end before its limit (the cold-start prior): likely is before the bound
    assert preview.likely_start is not None and preview.likely_start < preview.estimated_start
    assert (job.estimated_start, job.likely_start) == (
        preview.estimated_start,
        preview.likely_start or preview.estimated_start,
    )
    client = Client()
    client.force_login(mia)
    expected = [(job.estimated_start.isoformat(), job.likely_start.isoformat())]
    assert shown(client.get(f"/jobs/{job.pk}/").content.decode()) == expected
    assert shown(client.get("/queues/batch/").content.decode()) == expected
    # the submit form's preview part, drawn from the preview made before submitting
    assert shown(render_to_string("jobs/_preview.html", {"preview": preview})) == expected
