"""Free GPUs as people count them: whole GPUs and MIG slices, not "7.43"."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.formatting import format_free_devices
from queues.catalog.selectors import FreeDevices, free_devices
from queues.models import CapabilityClass, GpuClass, Node, Queue, Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100s(example_policy):
    a100 = GpuClass.objects.get(name="a100-80gb")
    Node.objects.create(name="a100-1", gpu_class=a100, gpu_count=8, outside_devices={"gpu": 1})
    Node.objects.create(
        name="a100-mig", gpu_class=a100, gpu_count=8, mig_layout={"1g.10gb": 28, "3g.40gb": 4}
    )
    Node.objects.create(name="a100-down", gpu_class=a100, gpu_count=8, healthy=False)
    t4 = GpuClass.objects.get(name="t4")
    Node.objects.create(name="t4-1", gpu_class=t4, gpu_count=4, time_slice_replicas=4)
    return a100


def test_it_counts_whole_gpus_and_slices_apart(a100s, mia):
    vision = Team.objects.get(name="vision")
    JobFactory(
        owner=mia,
        team=vision,
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        state="running",
        gpu_class=a100s,
        gpus_per_pod=2,
        pods=1,
        nodes=["a100-1"],
    )
    JobFactory(
        owner=mia,
        team=vision,
        queue=Queue.objects.get(name="interactive-mig"),
        capability_class=CapabilityClass.objects.get(name="mig-1g.10gb"),
        state="running",
        gpu_class=a100s,
        mig_profile="1g.10gb",
        gpus_per_pod=1,
        nodes=["a100-mig"],
    )

    free = free_devices()

    # 8 - 1 held outside - 2 held by a job; the unhealthy node counts for nothing
    assert free["a100-80gb"] == FreeDevices(gpus=5, slices={"1g.10gb": 27, "3g.40gb": 4})
    assert free["t4"] == FreeDevices(gpus=0, replicas=16, per_gpu=4)


def test_it_is_written_in_words_on_the_catalog(a100s, mia):
    client = Client()
    client.force_login(mia)

    html = client.get("/queues/").content.decode()

    assert "a100-80gb: 7 GPUs + 28 × 1g.10gb slices + 4 × 3g.40gb slices" in html


def test_the_words():
    assert format_free_devices(gpus=7, slices={"1g.10gb": 3}, replicas=0, per_gpu=1) == (
        "7 GPUs + 3 × 1g.10gb slices"
    )
    assert format_free_devices(gpus=1, slices={}, replicas=0, per_gpu=1) == "1 GPU"
    assert format_free_devices(gpus=0, slices={}, replicas=13, per_gpu=4) == (
        "13 time-slices (4 per GPU)"
    )
    assert format_free_devices(gpus=0, slices={}, replicas=0, per_gpu=1) == "none"
