"""Idle capacity beside the bill: the split of allocatable GPU-hours, from node-state history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chargeback.capacity import PARTS, capacity_split, exact_capacity_split
from queues.models import GpuClass, NodeState, NodeStateInterval, Reservation
from tests.chargeback.helpers import NOV, hold
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
D = Decimal
DAY = datetime(2026, 11, 2, tzinfo=UTC)


def _state(node, state, start, end, amount=Fraction(8)):
    return NodeStateInterval.objects.create(
        node=node,
        gpu_class=node.gpu_class,
        state=state,
        amount_numerator=amount.numerator,
        amount_denominator=amount.denominator,
        started_at=start,
        ended_at=end,
    )


def test_a_node_in_maintenance_for_half_a_day(example_policy):
    Reservation.objects.all().delete()
    l4 = GpuClass.objects.get(name="l4")
    node = NodeFactory(name="l4-01", gpu_class=l4, gpu_count=8)
    noon = DAY + timedelta(hours=12)
    _state(node, NodeState.AVAILABLE, DAY, noon)
    _state(node, NodeState.MAINTENANCE, noon, DAY + timedelta(days=1))
    # 2 L4s held from 06:00 to 10:00 on that node: 8 GPU-hours.
    hold(
        team="vision",
        gpu_class="l4",
        devices=2,
        start=DAY + timedelta(hours=6),
        end=DAY + timedelta(hours=10),
    )

    [split] = capacity_split(start=DAY, end=DAY + timedelta(days=1), now=DAY + timedelta(days=3))

    # 8 GPUs × 24 h = 192 allocatable: 8 used, 96 − 8 = 88 idle, 96 in maintenance.
    assert (split.gpu_class, split.allocatable, split.used, split.idle, split.maintenance) == (
        "l4",
        D("192.000"),
        D("8.000"),
        D("88.000"),
        D("96.000"),
    )
    assert (split.unhealthy, split.outside, split.reserved_idle) == (D(0), D(0), D(0))


def test_use_on_an_unhealthy_node_is_used_not_unhealthy(example_policy):
    Reservation.objects.all().delete()
    node = NodeFactory(name="l4-01", gpu_class=GpuClass.objects.get(name="l4"), gpu_count=8)
    _state(node, NodeState.UNHEALTHY, DAY, DAY + timedelta(hours=10), amount=Fraction(6))
    _state(node, NodeState.OUTSIDE, DAY, DAY + timedelta(hours=10), amount=Fraction(2))
    hold(team="vision", gpu_class="l4", start=DAY, end=DAY + timedelta(hours=10))

    [split] = capacity_split(start=DAY, end=DAY + timedelta(days=1), now=DAY + timedelta(days=1))

    # 6 × 10 = 60 unhealthy GPU-hours, of which 10 were held by a job; 2 × 10 outside.
    assert (split.allocatable, split.used, split.unhealthy, split.outside) == (
        D("80.000"),
        D("10.000"),
        D("50.000"),
        D("20.000"),
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    states=st.lists(
        st.tuples(
            st.sampled_from(list(NodeState)),
            st.integers(0, 47),
            st.integers(1, 48),
            st.sampled_from([Fraction(8), Fraction(2), Fraction(3, 7), Fraction(1, 4)]),
        ),
        max_size=6,
    ),
    usage=st.lists(
        st.tuples(st.integers(0, 47 * 3600), st.integers(1, 12 * 3600), st.integers(1, 4)),
        max_size=5,
    ),
)
def test_the_parts_add_up_to_the_allocatable_hours(example_policy, states, usage):
    with transaction.atomic():
        nodes = [
            NodeFactory(name=f"l4-0{n}", gpu_class=GpuClass.objects.get(name="l4")) for n in (1, 2)
        ]
        for n, (state, start, length, amount) in enumerate(states):
            NodeStateInterval.objects.create(
                node=nodes[n % 2],
                gpu_class=nodes[0].gpu_class,
                state=state,
                amount_numerator=amount.numerator,
                amount_denominator=amount.denominator,
                started_at=NOV + timedelta(hours=start),
                ended_at=NOV + timedelta(hours=start + length),
            )
        job = JobFactory()
        for start, length, devices in usage:
            hold(
                team="vision",
                gpu_class="l4",
                devices=devices,
                start=NOV + timedelta(seconds=start),
                end=NOV + timedelta(seconds=start + length),
                job=job,
            )

        for split in exact_capacity_split(
            start=NOV + timedelta(hours=3),
            end=NOV + timedelta(hours=40),
            now=NOV + timedelta(days=9),
        ):
            assert sum(getattr(split, part) for part in PARTS) == split.allocatable
        transaction.set_rollback(True)
