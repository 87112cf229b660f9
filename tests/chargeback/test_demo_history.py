"""The demo's history: three closed months of several teams' usage, recorded through the
reconcile's usage pass and closed with the month close, with a rate change, MIG and time-sliced
lines, waste and one late adjustment — so finance opens the demo on real months."""

from __future__ import annotations

import logging
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from chargeback.demo import history_months, seed_history
from chargeback.models import FrozenLine, Period
from chargeback.selectors import period_report, waste_lines
from chargeback.statements import statement
from queues.models import Job, JobState, SharingMode, UsageInterval

pytestmark = pytest.mark.django_db
CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


@pytest.fixture
def history(example_policy):
    logging.getLogger("queues.reconcile").setLevel(logging.WARNING)
    try:
        now = timezone.now()
        return now, seed_history(now=now, cluster_file=CLUSTER)
    finally:
        logging.getLogger("queues.reconcile").setLevel(logging.NOTSET)


def test_three_months_closed_in_order_by_the_scheduled_close(history):
    now, seeded = history

    periods = list(Period.objects.order_by("month"))

    assert [p.month for p in periods] == history_months(now) == seeded.months
    assert len(periods) == 3
    assert all(p.closed_by is None and p.closed_at > p.end for p in periods)
    assert not Job.objects.exclude(state__in=[JobState.SUCCEEDED, JobState.FAILED]).exists()
    assert not UsageInterval.objects.filter(ended_at__isnull=True).exists()


def test_each_month_has_teams_classes_and_sharing_modes(history):
    for period in Period.objects.all():
        lines = FrozenLine.objects.filter(period=period, adjustment_for__isnull=True)
        assert set(lines.values_list("team__name", flat=True)) == {
            "vision",
            "nlp",
            "speech",
            "search",
            "research",
        }
        assert set(lines.values_list("gpu_class__name", flat=True)) == {
            "h100-80gb",
            "a100-80gb",
            "l4",
            "t4",
        }
        assert set(lines.values_list("sharing_mode", flat=True)) == {
            SharingMode.EXCLUSIVE,
            SharingMode.MIG,
            SharingMode.TIME_SLICED,
        }


def test_the_usage_pass_recorded_shares_from_the_nodes(history):
    # A T4 replica is 1/4 of a GPU (the node's time-slice replicas), a 1g.10gb slice 1/7.
    assert set(
        UsageInterval.objects.filter(sharing_mode=SharingMode.TIME_SLICED).values_list(
            "share_numerator", "share_denominator", "node"
        )
    ) <= {(1, 4, f"t4-0{n}") for n in range(1, 5)}
    assert set(
        UsageInterval.objects.filter(sharing_mode=SharingMode.MIG).values_list(
            "share_numerator", "share_denominator", "node"
        )
    ) == {(1, 7, "a100-03")}


def test_a_rate_change_and_a_late_adjustment(history):
    now, seeded = history
    first, second, third = Period.objects.order_by("month")

    versions = {v for line in FrozenLine.objects.filter(period=second) for v in line.versions}
    assert len(versions) == 2  # the old card, and the new one from the 15th
    assert seeded.rate_change is not None and seeded.rate_change.day == 15
    # The pod reported after the first month closed is an adjustment of the second's close.
    adjustments = FrozenLine.objects.filter(adjustment_for__isnull=False)
    assert {(a.period_id, a.adjustment_for_id) for a in adjustments} == {(second.pk, first.pk)}
    late = UsageInterval.objects.get(pod_name=seeded.late_pod)
    assert late.started_at < first.end and late.ended_at < first.end
    # Its frozen lines plus the adjustment equal the month's statement now, to the cent.
    frozen = period_report(month=first.month, now=now, team_ids=None).totals.cost["EUR"]
    recorded = sum(a.cost for a in adjustments)
    assert recorded > 0
    assert (
        frozen + recorded == statement(start=first.start, end=first.end, now=now).totals.cost["EUR"]
    )
    assert third.closed_at <= now


def test_waste_is_there_to_see(history):
    for period in Period.objects.all():
        waste = waste_lines(start=period.start, end=period.end, now=period.closed_at, team_ids=None)
        assert sum(w.preempted_gpu_hours + w.drained_gpu_hours for w in waste) > 0
        assert sum(w.failed_gpu_hours for w in waste) > 0


def test_seed_demo_seeds_it_once(example_policy):
    out = StringIO()
    call_command("seed_demo", "--jobs", stdout=out)
    months = Period.objects.count()
    intervals = UsageInterval.objects.count()

    call_command("seed_demo_history", stdout=out)

    assert months == 3 and intervals > 1000
    assert (Period.objects.count(), UsageInterval.objects.count()) == (months, intervals)
    assert "demo history: usage exists already, nothing seeded" in out.getvalue()
