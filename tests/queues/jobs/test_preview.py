"""The submit preview: the same engine, nothing saved."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from queues.jobs.preview import job_preview
from queues.jobs.requests import JobRequest
from queues.models import CapabilityClass, GpuClass, Job, Node, Queue, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes(example_policy):
    a100 = GpuClass.objects.get(name="a100-80gb")
    h100 = GpuClass.objects.get(name="h100-80gb")
    Node.objects.create(name="a100-1", gpu_class=a100, gpu_count=8, network_domain="ib-b")
    Node.objects.create(name="h100-1", gpu_class=h100, gpu_count=8, network_domain="ib-a")


def request(user, team="vision", queue="training", capability="bf16-large", **fields):
    return JobRequest(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        image="registry.example/train:1",
        command=["python", "train.py"],
        **fields,
    )


def test_a_request_that_fits_starts_now_on_the_cheapest_class_with_its_cost(nodes, mia):
    preview = job_preview(request=request(mia, gpus_per_pod=4))

    assert preview.starts_now
    assert (preview.gpu_class, preview.capacity) == ("a100-80gb", "nominal")
    # 4 GPUs × weight 2.5 × 1.20 EUR
    assert (preview.cost_per_hour, preview.currency) == (Decimal("12.00"), "EUR")
    assert Job.objects.count() == 0


def test_a_request_that_must_wait_says_why_and_what_would_start_it_sooner(nodes, mia):
    # half of every node held by pods the portal did not create
    Node.objects.update(gpus_used_outside=4, outside_devices={"gpu": 4})

    preview = job_preview(request=request(mia, pods=1, gpus_per_pod=8), now=timezone.now())

    assert not preview.starts_now
    assert preview.binding is not None
    assert preview.binding.code.value in {"QuotaExceeded", "InsufficientCapacity", "Fragmentation"}
    assert preview.binding.message
    assert Job.objects.count() == 0


def test_a_request_that_can_never_start_is_refused_with_the_numbers(nodes, mia):
    # 16 GPUs; the cluster has 8 of each class the request resolves to
    preview = job_preview(request=request(mia, pods=2, gpus_per_pod=8))

    assert preview.errors == {
        "gpus_per_pod": [
            "can never start: a100-80gb: needs 16; team vision may hold at most 8 "
            "(nominal 4 + borrowing 4); h100-80gb: 2 pods × 8 GPUs do not fit its 1 node even "
            "when they are empty (at most 8 GPUs a node): ask for a shape the nodes can hold: "
            "fewer GPUs per pod, or less CPU or memory"
        ]
    }


def test_an_invalid_request_returns_its_errors_only(nodes, mia):
    preview = job_preview(request=request(mia, capability="any-gpu"))

    assert preview.errors == {
        "capability_class": [
            "queue training does not allow capability class any-gpu "
            "(allowed: bf16-large, fp8, multi-node-rdma)"
        ]
    }
    assert not preview.starts_now


def test_a_class_the_team_can_never_fill_says_so_and_the_estimate_is_on_the_one_it_can(
    example_policy, mia
):
    """2 × 8 in training for vision: a100 holds at most 8 for the team (4 + 4), h100 16 (8 +
    8) but busy for a day. The time given is on h100; the a100 reason says it never suffices
    there (the tester read "in 24 h on a100" beside "the team can never hold 16 A100s")."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model

    from queues.models import JobState
    from tests.factories import JobFactory

    a100 = GpuClass.objects.get(name="a100-80gb")
    h100 = GpuClass.objects.get(name="h100-80gb")
    for i in (1, 2):
        Node.objects.create(name=f"a100-{i}", gpu_class=a100, gpu_count=8, network_domain="ib-b")
        Node.objects.create(name=f"h100-{i}", gpu_class=h100, gpu_count=8, network_domain="ib-a")
    now = timezone.now()
    for i in (1, 2):
        JobFactory(
            owner=get_user_model().objects.get(username="noah"),
            team=Team.objects.get(name="nlp"),
            queue=Queue.objects.get(name="training"),
            capability_class=CapabilityClass.objects.get(name="bf16-large"),
            state=JobState.RUNNING,
            gpu_class=h100,
            nodes=[f"h100-{i}"],
            gpus_per_pod=8,
            capacity_kind="nominal",
            started_at=now - timedelta(hours=1),
            admitted_at=now - timedelta(hours=1),
            runtime_limit=timedelta(hours=24),
        )

    preview = job_preview(request=request(mia, pods=2, gpus_per_pod=8), now=now)

    assert (preview.gpu_class, preview.errors) == ("h100-80gb", {})
    assert preview.estimated_start is not None
    (a100_reason,) = [r for r in preview.reasons if r.details.get("gpu_class") == "a100-80gb"]
    assert a100_reason.message == (
        "team vision: a100-80gb quota 0/4 in use, borrowing 0/4 in use (needs 16): never "
        "enough on a100-80gb, where the team may hold at most 8"
    )
    assert a100_reason.hint.startswith("it waits for another GPU class it may use")
