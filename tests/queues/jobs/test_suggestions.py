""" "Would start sooner": every alternative the engine offers is a submission of the same job
that the portal accepts in the queue it names (queues/jobs/requests.py, every rule)."""

from __future__ import annotations

import dataclasses

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from queues.jobs.preview import job_alternatives, job_preview
from queues.jobs.requests import JobRequest, job_request_errors
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, GpuClass, Node, Queue, Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy_cluster(example_policy):
    """A small cluster like the demo's, most of its H100s held outside the portal."""
    h100 = GpuClass.objects.get(name="h100-80gb")
    a100 = GpuClass.objects.get(name="a100-80gb")
    l4 = GpuClass.objects.get(name="l4")
    t4 = GpuClass.objects.get(name="t4")
    for name in ("h100-1", "h100-2"):
        Node.objects.create(
            name=name, gpu_class=h100, gpu_count=8, network_domain="ib-a", rack="rack-1"
        )
    Node.objects.create(name="a100-1", gpu_class=a100, gpu_count=8, network_domain="ib-b")
    Node.objects.create(
        name="a100-mig", gpu_class=a100, gpu_count=8, mig_layout={"1g.10gb": 28, "3g.40gb": 8}
    )
    Node.objects.create(name="l4-1", gpu_class=l4, gpu_count=4)
    Node.objects.create(name="t4-1", gpu_class=t4, gpu_count=4, time_slice_replicas=4)
    # h100-1 held outside the portal
    Node.objects.filter(name="h100-1").update(gpus_used_outside=8, outside_devices={"gpu": 8})
    # mia is at her limits: 4 running training jobs (the queue's maximum per user) and 2
    # interactive ones; so her training and interactive jobs wait while other queues have room
    mia = get_user_model().objects.get(username="mia")
    for queue, capability, gpu_class, node in [
        *[("training", "bf16-large", a100, "a100-1")] * 4,
        *[("interactive", "any-gpu", t4, "t4-1")] * 2,
    ]:
        JobFactory(
            owner=mia,
            team=Team.objects.get(name="nlp"),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            state="running",
            gpu_class=gpu_class,
            nodes=[node],
            capacity_kind="nominal",
            declared_gpu_memory_gb=4 if queue == "interactive" else None,
            started_at=timezone.now(),
        )


def request(user, team, queue, capability, **fields):
    return JobRequest(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        image="registry.example/train:1",
        command=["python", "train.py"],
        **fields,
    )


# (team, queue, capability class, fields): jobs that wait in the busy cluster
TABLE = [
    ("vision", "training", "fp8", {"pods": 1, "gpus_per_pod": 8}),
    ("nlp", "training", "bf16-large", {"pods": 2, "gpus_per_pod": 8}),
    ("vision", "training", "bf16-large", {"pods": 1, "gpus_per_pod": 8}),
    ("nlp", "training", "multi-node-rdma", {"pods": 2, "gpus_per_pod": 4}),
    ("vision", "batch", "min-40gb", {"pods": 1, "gpus_per_pod": 8}),
    ("vision", "batch", "fp8", {"pods": 1, "gpus_per_pod": 8}),
    ("vision", "training", "bf16-large", {"pods": 1, "gpus_per_pod": 4, "runtime_limit": None}),
    ("vision", "interactive", "any-gpu", {"declared_gpu_memory_gb": 8}),
    ("vision", "interactive-mig", "mig-3g.40gb", {}),
]


def _assert_followable(job_request, alternatives):
    assert len({a.queue for a in alternatives}) == len(alternatives)  # one per queue
    for alternative in alternatives:
        moved = dataclasses.replace(
            job_request,
            queue=Queue.objects.get(name=alternative.queue),
            capability_class=CapabilityClass.objects.get(name=alternative.capability),
        )
        assert job_request_errors(moved) == {}, (alternative, job_request)


@pytest.mark.parametrize(("team", "queue", "capability", "fields"), TABLE)
def test_every_suggestion_passes_the_named_queues_submit_checks(
    busy_cluster, mia, team, queue, capability, fields
):
    job_request = request(mia, team, queue, capability, **fields)
    assert job_request_errors(job_request) == {}
    preview = job_preview(request=job_request, now=timezone.now())
    _assert_followable(job_request, preview.alternatives)

    job = job_submit(request=job_request)
    alternatives = job_alternatives(job=job).alternatives
    _assert_followable(JobRequest.of_job(job), alternatives)


def test_the_table_has_suggestions_to_check(busy_cluster, mia):
    """The table above is not vacuous: its waiting jobs get suggestions."""
    offered = 0
    for team, queue, capability, fields in TABLE:
        preview = job_preview(request=request(mia, team, queue, capability, **fields))
        offered += len(preview.alternatives)
    assert offered >= 5


def test_an_fp8_gang_is_never_told_to_use_a_t4_or_a_slice(busy_cluster, mia):
    job_request = request(mia, "vision", "training", "fp8", pods=1, gpus_per_pod=8)

    preview = job_preview(request=job_request, now=timezone.now())

    offered = {(a.queue, a.capability) for a in preview.alternatives}
    assert not preview.starts_now
    # batch runs the same fp8 job on the free H100s at once; interactive (T4, 1 GPU) never
    assert ("batch", "fp8") in offered
    assert all(q not in ("interactive", "interactive-mig") for q, _ in offered)
    batch = next(a for a in preview.alternatives if (a.queue, a.capability) == ("batch", "fp8"))
    assert (batch.admitted_now, batch.preemption, batch.same_capability) == (
        True,
        "preemptible",
        True,
    )


def test_a_bf16_gang_is_never_offered_a_mig_slice(busy_cluster, mia):
    job = job_submit(request=request(mia, "nlp", "training", "bf16-large", pods=2, gpus_per_pod=8))

    offered = {a.capability for a in job_alternatives(job=job).alternatives}

    assert not {c for c in offered if c.startswith("mig-")}
    assert "any-gpu" not in offered and "min-40gb" not in offered  # would drop bf16 or 40 GB


def test_a_suggestion_followed_starts_the_job(busy_cluster, mia):
    waiting = request(mia, "vision", "training", "fp8", pods=1, gpus_per_pod=8)
    alternative = next(
        a for a in job_preview(request=waiting, now=timezone.now()).alternatives if a.admitted_now
    )

    followed = dataclasses.replace(
        waiting,
        queue=Queue.objects.get(name=alternative.queue),
        capability_class=CapabilityClass.objects.get(name=alternative.capability),
    )

    assert job_preview(request=followed).starts_now
