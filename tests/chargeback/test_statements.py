"""Statements computed in the database: the hand-computed examples of issue 13, and the SQL path
agreeing exactly with the rating rule of queues.rates."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chargeback.statements import statement
from queues.models import GpuClass, RateCard, RateCardWeight, SharingMode, Team, TeamCostCenter
from queues.rates import rate_interval, round_hours, round_money
from tests.chargeback.helpers import DEC, NOV, hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
D = Decimal


def _row(line):
    return (
        line.device_hours,
        line.gpu_hours,
        line.normalized_gpu_hours,
        line.cost,
        line.versions,
        line.provisional,
    )


def test_a_two_h100_job_across_the_months_end_is_split_between_the_months(example_policy):
    # 2 × H100 (weight 4, 1.20 EUR) from Nov 30 20:00 to Dec 1 04:00: 4 h in each month.
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=datetime(2026, 11, 30, 20, tzinfo=UTC),
        end=datetime(2026, 12, 1, 4, tzinfo=UTC),
    )
    now = datetime(2026, 12, 15, tzinfo=UTC)

    november = statement(start=NOV, end=DEC, now=now)
    december = statement(start=DEC, end=datetime(2027, 1, 1, tzinfo=UTC), now=now)

    for month in (november, december):
        [line] = month.lines
        assert line.key == {
            "team": "vision",
            "cost_center": "CC-1001",
            "gpu_class": "h100-80gb",
            "sharing_mode": "exclusive",
        }
        # 4 h × 2 = 8 device-hours = 8 GPU-hours; × 4 = 32 normalized; × 1.20 = 38.40 EUR
        assert _row(line) == (
            D("8.000"),
            D("8.000"),
            D("32.000"),
            D("38.40"),
            ("2026-01-01T00:00:00Z",),
            False,
        )


def test_a_weight_change_in_the_middle_of_a_job_splits_its_line(example_policy):
    h100 = GpuClass.objects.get(name="h100-80gb")
    card = RateCard.objects.create(
        effective_from=datetime(2026, 11, 5, 12, tzinfo=UTC),
        currency="EUR",
        price_per_normalized_gpu_hour=D("1.20"),
    )
    RateCardWeight.objects.create(rate_card=card, gpu_class=h100, weight=D(3))
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        devices=2,
        start=datetime(2026, 11, 5, 10, tzinfo=UTC),
        end=datetime(2026, 11, 5, 16, tzinfo=UTC),
    )

    [line] = statement(start=NOV, end=DEC, now=DEC).lines

    # 2 h × 2 × 4 = 16 normalized (19.20 EUR) + 4 h × 2 × 3 = 24 normalized (28.80 EUR)
    assert _row(line) == (
        D("12.000"),
        D("12.000"),
        D("40.000"),
        D("48.00"),
        ("2026-01-01T00:00:00Z", "2026-11-05T12:00:00Z"),
        False,
    )


def test_a_1g10gb_mig_slice_for_seven_hours(example_policy):
    hold(
        team="vision",
        gpu_class="a100-80gb",
        share=Fraction(1, 7),
        mode=SharingMode.MIG,
        start=datetime(2026, 11, 3, 8, tzinfo=UTC),
        end=datetime(2026, 11, 3, 15, tzinfo=UTC),
    )

    [line] = statement(start=NOV, end=DEC, now=DEC).lines

    # 7 device-hours × 1/7 = 1 GPU-hour; × 2.5 (A100) = 2.5 normalized; × 1.20 = 3.00 EUR
    assert line.key["sharing_mode"] == "mig"
    assert _row(line)[:4] == (D("7.000"), D("1.000"), D("2.500"), D("3.00"))


def test_one_replica_of_a_four_way_time_sliced_gpu_for_ten_hours(example_policy):
    hold(
        team="speech",
        gpu_class="t4",
        share=Fraction(1, 4),
        mode=SharingMode.TIME_SLICED,
        start=datetime(2026, 11, 3, 0, tzinfo=UTC),
        end=datetime(2026, 11, 3, 10, tzinfo=UTC),
    )

    [line] = statement(start=NOV, end=DEC, now=DEC).lines

    # 10 device-hours × 1/4 = 2.5 GPU-hours; × 0.5 (T4) = 1.25 normalized; × 1.20 = 1.50 EUR
    assert _row(line)[:4] == (D("10.000"), D("2.500"), D("1.250"), D("1.50"))
    assert "charged by allocation share" in line.note


def test_a_team_whose_cost_center_changed_mid_month_gets_two_lines(example_policy):
    vision = Team.objects.get(name="vision")
    TeamCostCenter.objects.filter(team=vision).delete()
    TeamCostCenter.objects.create(team=vision, cost_center="CC-1001", effective_from=NOV)
    TeamCostCenter.objects.create(
        team=vision, cost_center="CC-9999", effective_from=datetime(2026, 11, 15, tzinfo=UTC)
    )
    # One L4 (weight 1) from Nov 10 to Nov 20: 5 days under each cost center.
    hold(
        team=vision,
        gpu_class="l4",
        cost_center="CC-1001",
        start=datetime(2026, 11, 10, tzinfo=UTC),
        end=datetime(2026, 11, 20, tzinfo=UTC),
    )

    lines = statement(start=NOV, end=DEC, now=DEC).lines

    # 120 GPU-hours × 1 × 1.20 = 144.00 EUR each
    assert [(line.key["cost_center"], *_row(line)[:4]) for line in lines] == [
        ("CC-1001", D("120.000"), D("120.000"), D("120.000"), D("144.00")),
        ("CC-9999", D("120.000"), D("120.000"), D("120.000"), D("144.00")),
    ]


def test_an_open_interval_counts_until_now_and_is_provisional(example_policy):
    hold(team="vision", gpu_class="l4", start=datetime(2026, 11, 30, 22, tzinfo=UTC), end=None)

    [line] = statement(start=NOV, end=DEC, now=datetime(2026, 11, 30, 23, 30, tzinfo=UTC)).lines

    assert _row(line) == (
        D("1.500"),
        D("1.500"),
        D("1.500"),
        D("1.80"),
        ("2026-01-01T00:00:00Z",),
        True,
    )
    assert "provisional" in line.note


def test_use_before_any_rate_card_is_shown_unrated(example_policy):
    hold(
        team="vision",
        gpu_class="l4",
        start=datetime(2025, 12, 31, 23, tzinfo=UTC),
        end=datetime(2026, 1, 1, 1, tzinfo=UTC),
    )

    lines = statement(
        start=datetime(2025, 12, 1, tzinfo=UTC), end=datetime(2026, 2, 1, tzinfo=UTC), now=DEC
    ).lines

    assert [(line.currency, line.gpu_hours, line.cost) for line in lines] == [
        ("", D("1.000"), None),
        ("EUR", D("1.000"), D("1.20")),
    ]
    assert lines[0].note == "not rated: no rate card weighs this class then"


# --- The SQL path and the Python rule agree exactly ------------------------------------------

CLASSES = ["h100-80gb", "a100-80gb", "l4", "t4"]
TEAMS = ["vision", "nlp", "speech"]
intervals = st.lists(
    st.tuples(
        st.sampled_from(TEAMS),
        st.sampled_from(CLASSES),
        st.integers(min_value=-5 * 86400 * 10**6, max_value=35 * 86400 * 10**6),  # start (µs)
        st.one_of(st.none(), st.integers(min_value=0, max_value=9 * 86400 * 10**6)),  # length
        st.integers(min_value=1, max_value=8),
        st.sampled_from([(1, 1), (1, 7), (3, 7), (1, 4), (1, 3)]),
    ),
    max_size=12,
)
card_changes = st.lists(
    st.tuples(
        st.integers(min_value=-3 * 86400, max_value=33 * 86400),
        st.sampled_from(["0.5", "1", "2.5", "3", "4.125"]),
        st.sampled_from(["0.97", "1.20", "1.3333"]),
    ),
    max_size=3,
    unique_by=lambda c: c[0],
)
cc_changes = st.lists(
    st.tuples(st.sampled_from(TEAMS), st.integers(min_value=-3 * 86400, max_value=33 * 86400)),
    max_size=3,
    unique_by=lambda c: c,
)


def _reference(cards, start, end, now, rows, history):
    """Each interval by queues.rates.rate_interval, split at its team's cost-center changes."""
    sums = defaultdict(lambda: [Fraction(0)] * 4)
    versions = defaultdict(set)
    for row in rows:
        windows = history.get(row.team_id, [])
        bounds = [(start, row.cost_center)]
        for at, cost_center in windows:
            if at <= start:
                bounds[0] = (start, cost_center)
            elif at < end:
                bounds.append((at, cost_center))
        for index, (lo, cost_center) in enumerate(bounds):
            hi = bounds[index + 1][0] if index + 1 < len(bounds) else end
            for part in rate_interval(
                start=row.started_at,
                end=max(row.ended_at or now, row.started_at),
                devices=row.devices,
                share=row.share,
                gpu_class=row.gpu_class.name,
                cards=cards,
                window_start=lo,
                window_end=min(hi, now),
            ):
                key = (
                    row.team.name,
                    cost_center,
                    row.gpu_class.name,
                    row.sharing_mode,
                    part.currency,
                )
                acc = sums[key]
                acc[0] += part.device_hours
                acc[1] += part.gpu_hours
                acc[2] += part.normalized_gpu_hours or 0
                acc[3] += part.cost or 0
                if part.version:
                    versions[key].add(part.version)
    return {
        key: (
            round_hours(acc[0]),
            round_hours(acc[1]),
            round_hours(acc[2]) if key[-1] else None,
            round_money(acc[3]) if key[-1] else None,
            tuple(sorted(versions[key])),
        )
        for key, acc in sums.items()
    }


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=intervals, cards=card_changes, changes=cc_changes, cut=st.integers(1, 29 * 86400))
def test_the_database_statement_is_the_rating_rule_summed(
    example_policy, rows, cards, changes, cut
):
    now = datetime(2026, 11, 28, 12, 0, 0, 123456, tzinfo=UTC)
    with transaction.atomic():
        for offset, weight, price in cards:
            card = RateCard.objects.create(
                effective_from=NOV + timedelta(seconds=offset),
                currency="EUR",
                price_per_normalized_gpu_hour=D(price),
            )
            RateCardWeight.objects.bulk_create(
                RateCardWeight(rate_card=card, gpu_class=g, weight=D(weight) * (i + 1))
                for i, g in enumerate(GpuClass.objects.filter(name__in=CLASSES[:3]))
            )
        TeamCostCenter.objects.all().delete()
        for n, (team, offset) in enumerate(changes):
            TeamCostCenter.objects.create(
                team=Team.objects.get(name=team),
                cost_center=f"CC-X{n}",
                effective_from=NOV + timedelta(seconds=offset),
            )
        jobs = {name: JobFactory(team=Team.objects.get(name=name)) for name in TEAMS}
        for team, klass, start_us, length_us, devices, (num, den) in rows:
            start = NOV + timedelta(microseconds=start_us)
            mode = SharingMode.EXCLUSIVE if num == den else SharingMode.TIME_SLICED
            hold(
                team=team,
                gpu_class=klass,
                start=start,
                end=None if length_us is None else start + timedelta(microseconds=length_us),
                devices=devices,
                share=Fraction(num, den),
                mode=mode,
                job=jobs[team],
            )
        from queues.models import UsageInterval

        history = defaultdict(list)
        for h in TeamCostCenter.objects.order_by("effective_from"):
            history[h.team_id].append((h.effective_from, h.cost_center))
        usage = list(UsageInterval.objects.select_related("team", "gpu_class"))
        terms = RateCard.objects.all().terms()
        middle = NOV + timedelta(seconds=cut)

        whole = statement(start=NOV, end=DEC, now=now)
        halves = [
            statement(start=NOV, end=middle, now=now),
            statement(start=middle, end=DEC, now=now),
        ]

        got = {(*line.key.values(), line.currency): _row(line)[:5] for line in whole.lines}
        assert got == _reference(terms, NOV, DEC, now, usage, history)
        # Splitting the period in two never changes the sum (before rounding the lines).
        for field in ("gpu_hours", "device_hours"):
            split = sum(getattr(line, field) for half in halves for line in half.lines)
            assert abs(split - getattr(whole.totals, field)) <= D("0.001") * len(
                [line for half in halves for line in half.lines]
            )
        # Normalized GPU-hours are never more than GPU-hours × the largest weight.
        largest = max([w.weight for w in RateCardWeight.objects.all()] or [D(0)])
        for line in whole.lines:
            if line.normalized_gpu_hours is not None:
                # (both are rounded to 0.001: each may be off by half of it)
                slack = D("0.0005") * (1 + largest)
                assert line.normalized_gpu_hours <= line.gpu_hours * largest + slack
        transaction.set_rollback(True)
