"""A member's own usage over time: GPU-hours per UTC day, split at midnight."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from django.test import Client

from chargeback.selectors import own_usage_by_day
from queues.models import Team
from tests.chargeback.helpers import hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_it_splits_each_hold_at_midnight_and_counts_an_open_one_until_now(mia):
    vision = Team.objects.get(name="vision")
    mine = JobFactory(owner=mia, team=vision)
    # 8 GPUs from 22:00 to 02:00: 16 GPU-hours on Dec 1, 16 on Dec 2
    hold(
        team=vision,
        gpu_class="h100-80gb",
        job=mine,
        devices=8,
        start=datetime(2026, 12, 1, 22, tzinfo=UTC),
        end=datetime(2026, 12, 2, 2, tzinfo=UTC),
    )
    # one 1g.10gb slice (1/7) since 05:00 today, still held: 7 h × 1/7 = 1 GPU-hour
    hold(
        team=vision,
        gpu_class="a100-80gb",
        job=mine,
        share=Fraction(1, 7),
        start=datetime(2026, 12, 3, 5, tzinfo=UTC),
        end=None,
    )
    # someone else's job in the same team does not count
    hold(
        team=vision,
        gpu_class="h100-80gb",
        devices=8,
        start=datetime(2026, 12, 2, 0, tzinfo=UTC),
        end=datetime(2026, 12, 2, 10, tzinfo=UTC),
    )

    days = own_usage_by_day(mia, now=NOW, days=4)

    assert [(d.day, d.gpu_hours) for d in days] == [
        (date(2026, 11, 30), Decimal("0.000")),
        (date(2026, 12, 1), Decimal("16.000")),
        (date(2026, 12, 2), Decimal("16.000")),
        (date(2026, 12, 3), Decimal("1.000")),
    ]


def test_the_usage_page_draws_the_members_own_usage(mia):
    client = Client()
    client.force_login(mia)

    html = client.get("/usage/").content.decode()

    assert 'data-testid="chart-mine"' in html
    assert "My own jobs: 0.000 GPU-hours in the last 30 days" in html
