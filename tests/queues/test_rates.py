"""The chargeback arithmetic, reproducible by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.jobs.selectors import hourly_cost
from queues.rates import cost_per_hour, rate
from tests.factories import GpuClassFactory, RateCardFactory, RateCardWeightFactory


def test_eight_h100s_for_ten_hours():
    rating = rate(
        held=timedelta(hours=10), devices=8, share=1, weight=Decimal(4), price=Decimal("1.20")
    )

    assert rating.device_hours == Decimal(80)
    assert rating.gpu_hours == Decimal(80)
    assert rating.normalized_gpu_hours == Decimal(320)
    assert rating.cost == Decimal("384.00")


def test_a_mig_slice_counts_its_share():
    rating = rate(
        held=timedelta(minutes=90),
        devices=1,
        share=Fraction(3, 7),
        weight=Decimal("2.5"),
        price=Decimal("1.20"),
    )

    assert rating.device_hours == Decimal("1.5")
    assert rating.gpu_hours.quantize(Decimal("0.000001")) == Decimal("0.642857")
    assert rating.cost.quantize(Decimal("0.01")) == Decimal("1.93")


def test_a_time_slice_replica_counts_one_over_replicas():
    rating = rate(
        held=timedelta(hours=2),
        devices=1,
        share=Fraction(1, 4),
        weight=Decimal("0.5"),
        price=Decimal("1.20"),
    )

    assert rating.gpu_hours == Decimal("0.5")
    assert rating.cost == Decimal("0.300")


@given(
    seconds=st.integers(min_value=0, max_value=10**7),
    split=st.integers(min_value=0, max_value=10**7),
    devices=st.integers(min_value=1, max_value=64),
)
def test_splitting_an_interval_never_changes_its_gpu_hours(seconds, split, devices):
    split = min(split, seconds)
    whole = rate(
        held=timedelta(seconds=seconds),
        devices=devices,
        share=1,
        weight=Decimal(1),
        price=Decimal(1),
    )
    first = rate(
        held=timedelta(seconds=split), devices=devices, share=1, weight=Decimal(1), price=Decimal(1)
    )
    rest = rate(
        held=timedelta(seconds=seconds - split),
        devices=devices,
        share=1,
        weight=Decimal(1),
        price=Decimal(1),
    )

    assert (first.gpu_hours + rest.gpu_hours).quantize(
        Decimal("1E-12")
    ) == whole.gpu_hours.quantize(Decimal("1E-12"))


def test_cost_per_hour_of_a_preview():
    assert cost_per_hour(gpu_equivalents=2, weight=Decimal(4), price=Decimal("1.20")) == Decimal(
        "9.60"
    )


@pytest.mark.django_db
def test_hourly_cost_uses_the_card_in_force_when_asked():
    h100 = GpuClassFactory(name="h100-80gb")
    old = RateCardFactory(
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        price_per_normalized_gpu_hour=Decimal("1.00"),
    )
    new = RateCardFactory(
        effective_from=datetime(2026, 7, 1, tzinfo=UTC),
        price_per_normalized_gpu_hour=Decimal("1.50"),
    )
    RateCardWeightFactory(rate_card=old, gpu_class=h100, weight=Decimal(4))
    RateCardWeightFactory(rate_card=new, gpu_class=h100, weight=Decimal(3))

    march = hourly_cost(
        gpu_class="h100-80gb", gpu_equivalents=1, at=datetime(2026, 3, 1, tzinfo=UTC)
    )
    august = hourly_cost(
        gpu_class="h100-80gb", gpu_equivalents=Fraction(1, 2), at=datetime(2026, 8, 1, tzinfo=UTC)
    )

    assert (march.amount, march.currency) == (Decimal("4.00"), "EUR")
    assert august.amount == Decimal("2.250")
    assert (
        hourly_cost(gpu_class="h100-80gb", gpu_equivalents=1, at=datetime(2025, 1, 1, tzinfo=UTC))
        is None
    )
    assert (
        hourly_cost(gpu_class="t4", gpu_equivalents=1, at=datetime(2026, 8, 1, tzinfo=UTC)) is None
    )


@pytest.mark.django_db
def test_a_jobs_cost_so_far_counts_open_intervals_until_now(example_policy):
    from datetime import timedelta

    from django.utils import timezone

    from queues.jobs.selectors import job_cost_so_far
    from queues.models import GpuClass, Team, UsageInterval
    from tests.factories import JobFactory

    now = timezone.now()
    job = JobFactory()
    h100 = GpuClass.objects.get(name="h100-80gb")
    vision = Team.objects.get(name="vision")
    common = dict(job=job, team=vision, cost_center="CC-1001", gpu_class=h100, node="h100-01")
    UsageInterval.objects.create(
        pod_uid="a",
        pod_name="p-0",
        devices=4,
        started_at=now - timedelta(hours=2),
        ended_at=now - timedelta(hours=1),
        **common,
    )
    UsageInterval.objects.create(
        pod_uid="b", pod_name="p-1", devices=4, started_at=now - timedelta(minutes=30), **common
    )

    cost = job_cost_so_far(job, now=now)

    # (1 h + 0.5 h) × 4 GPUs × weight 4 × 1.20 EUR = 28.80 EUR
    assert (cost.amount, cost.currency, cost.normalized_gpu_hours, cost.running) == (
        Decimal("28.80"),
        "EUR",
        Decimal("24.000"),
        True,
    )
    assert job_cost_so_far(JobFactory(), now=now) is None
