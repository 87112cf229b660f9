"""Node-state intervals: opened and closed by the node pass when what a node shows changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from queues.models import NodeStateInterval
from queues.reconcile.nodes import node_states_sync
from tests.factories import GpuClassFactory, NodeFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _rows():
    return sorted(
        (r.state, r.amount, r.started_at - T0, r.ended_at and r.ended_at - T0)
        for r in NodeStateInterval.objects.all()
    )


def test_a_node_changing_state_closes_one_interval_and_opens_the_next_at_one_instant():
    node = NodeFactory(gpu_class=GpuClassFactory(), gpu_count=8, outside_devices={"gpu": 2})
    h = timedelta(hours=1)

    node_states_sync(nodes=[node], now=T0)
    node_states_sync(nodes=[node], now=T0 + h)  # nothing changed: nothing written
    node.healthy = False
    node_states_sync(nodes=[node], now=T0 + 2 * h)
    node_states_sync(nodes=[node], now=T0 + 2 * h)  # a rerun opens nothing twice
    node_states_sync(nodes=[], now=T0 + 3 * h)  # the node left the cluster

    assert _rows() == [
        ("available", Fraction(6), timedelta(0), 2 * h),
        ("outside", Fraction(2), timedelta(0), 3 * h),
        ("unhealthy", Fraction(6), 2 * h, 3 * h),
    ]


def test_maintenance_and_mig_slices_outside_are_exact():
    gpu_class = GpuClassFactory(mig_profiles={"1g.10gb": "1/7"})
    node = NodeFactory(
        gpu_class=gpu_class, gpu_count=8, maintenance="cordoned", outside_devices={"1g.10gb": 3}
    )

    node_states_sync(nodes=[node], now=T0)

    assert _rows() == [
        ("maintenance", Fraction(53, 7), timedelta(0), None),
        ("outside", Fraction(3, 7), timedelta(0), None),
    ]
