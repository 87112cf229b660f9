"""The chargeback arithmetic, reproducible by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queues.jobs.selectors import hourly_cost
from queues.rates import CardTerms, cost_per_hour, rate, rate_interval, round_hours, round_money
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


# --- rate_interval: clipped to a window, split at rate-card changes ------------------------------

NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)


def _card(at, weight, price="1.20", version=None):
    return CardTerms(
        effective_from=at,
        weights={"h100-80gb": Decimal(weight)},
        price=Decimal(price),
        currency="EUR",
        version=version or at.isoformat(),
    )


def test_an_interval_is_clipped_to_the_window():
    # 2×H100 from Nov 30 20:00 to Dec 1 04:00: 4 h in November, 4 h in December.
    parts = rate_interval(
        start=datetime(2026, 11, 30, 20, tzinfo=UTC),
        end=datetime(2026, 12, 1, 4, tzinfo=UTC),
        devices=2,
        share=Fraction(1),
        gpu_class="h100-80gb",
        cards=[_card(datetime(2026, 1, 1, tzinfo=UTC), 4)],
        window_start=NOV,
        window_end=DEC,
    )

    [part] = parts
    # 4 h × 2 devices = 8 device-hours = 8 GPU-hours; × weight 4 = 32; × 1.20 = 38.40
    assert (part.device_hours, part.gpu_hours, part.normalized_gpu_hours, part.cost) == (
        8,
        8,
        32,
        Fraction("38.40"),
    )


def test_a_weight_change_in_the_middle_splits_the_interval():
    # 1 H100 from 10:00 to 16:00; the weight goes from 4 to 3 at 12:00 (price 1.20 on both).
    parts = rate_interval(
        start=datetime(2026, 11, 5, 10, tzinfo=UTC),
        end=datetime(2026, 11, 5, 16, tzinfo=UTC),
        devices=1,
        share=Fraction(1),
        gpu_class="h100-80gb",
        cards=[
            _card(datetime(2026, 11, 5, 12, tzinfo=UTC), 3, version="v2"),
            _card(datetime(2026, 1, 1, tzinfo=UTC), 4, version="v1"),
        ],
    )

    # 2 h × 4 × 1.20 = 9.60 (v1), 4 h × 3 × 1.20 = 14.40 (v2)
    assert [(p.version, p.gpu_hours, p.normalized_gpu_hours, p.cost) for p in parts] == [
        ("v1", 2, 8, Fraction("9.60")),
        ("v2", 4, 12, Fraction("14.40")),
    ]


def test_use_before_any_card_or_of_an_unweighed_class_is_not_rated():
    parts = rate_interval(
        start=datetime(2025, 12, 31, 23, tzinfo=UTC),
        end=datetime(2026, 1, 1, 1, tzinfo=UTC),
        devices=1,
        share=Fraction(1),
        gpu_class="h100-80gb",
        cards=[_card(datetime(2026, 1, 1, tzinfo=UTC), 4, version="v1")],
    )
    other = rate_interval(
        start=NOV,
        end=NOV + timedelta(hours=1),
        devices=1,
        share=Fraction(1),
        gpu_class="t4",
        cards=[_card(datetime(2026, 1, 1, tzinfo=UTC), 4, version="v1")],
    )

    assert [(p.version, p.gpu_hours, p.cost) for p in parts] == [
        (None, 1, None),
        ("v1", 1, Fraction("4.80")),
    ]
    assert [(p.version, p.gpu_hours, p.cost) for p in other] == [(None, 1, None)]


def test_rounding_is_half_up_once():
    assert round_money(Fraction(5, 1000)) == Decimal("0.01")
    assert round_money(Fraction(-5, 1000)) == Decimal("-0.01")
    assert round_money(Fraction(4999, 1000000)) == Decimal("0.00")
    assert round_hours(Fraction(1, 7)) == Decimal("0.143")


@given(
    minutes=st.integers(min_value=1, max_value=60 * 24 * 40),
    offset=st.integers(min_value=0, max_value=60 * 24 * 40),
    cut=st.integers(min_value=0, max_value=60 * 24 * 80),
    devices=st.integers(min_value=1, max_value=8),
    denominator=st.integers(min_value=1, max_value=7),
)
def test_splitting_the_window_never_changes_the_sum(minutes, offset, cut, devices, denominator):
    start = NOV - timedelta(days=20) + timedelta(minutes=offset)
    end = start + timedelta(minutes=minutes)
    cards = [
        _card(datetime(2026, 1, 1, tzinfo=UTC), 4),
        _card(NOV + timedelta(days=3, seconds=7), "2.5", price="0.97"),
    ]
    middle = NOV - timedelta(days=20) + timedelta(minutes=cut)
    kwargs = dict(
        start=start,
        end=end,
        devices=devices,
        share=Fraction(1, denominator),
        gpu_class="h100-80gb",
        cards=cards,
    )
    whole = rate_interval(**kwargs)
    halves = rate_interval(**kwargs, window_end=middle) + rate_interval(
        **kwargs, window_start=middle
    )

    assert sum(p.cost for p in halves) == sum(p.cost for p in whole)
    assert sum(p.gpu_hours for p in whole) == Fraction(minutes * devices, 60 * denominator)


@pytest.mark.django_db
def test_a_jobs_cost_so_far_splits_at_a_weight_change(example_policy):
    from queues.jobs.selectors import job_cost_so_far
    from queues.models import GpuClass, RateCard, RateCardWeight, Team, UsageInterval
    from tests.factories import JobFactory

    h100 = GpuClass.objects.get(name="h100-80gb")
    # The example card (from 2026-01-01) weighs an H100 4 at 1.20 EUR; from Nov 5 12:00 it is 3.
    card = RateCard.objects.create(
        effective_from=datetime(2026, 11, 5, 12, tzinfo=UTC),
        currency="EUR",
        price_per_normalized_gpu_hour=Decimal("1.20"),
    )
    RateCardWeight.objects.create(rate_card=card, gpu_class=h100, weight=Decimal(3))
    job = JobFactory()
    UsageInterval.objects.create(
        job=job,
        team=Team.objects.get(name="vision"),
        cost_center="CC-1001",
        gpu_class=h100,
        node="h100-01",
        pod_uid="a",
        pod_name="p-0",
        devices=2,
        started_at=datetime(2026, 11, 5, 10, tzinfo=UTC),
        ended_at=datetime(2026, 11, 5, 16, tzinfo=UTC),
    )

    cost = job_cost_so_far(job, now=datetime(2026, 11, 6, tzinfo=UTC))

    # 2 h × 2 GPUs × 4 = 16 normalized (19.20 EUR) + 4 h × 2 × 3 = 24 normalized (28.80 EUR)
    assert (cost.amount, cost.normalized_gpu_hours, cost.running) == (
        Decimal("48.00"),
        Decimal("40.000"),
        False,
    )
