"""The operations history's numbers against hand-computed fixtures: capacity by state and
fragmentation from a snapshot, allocation over a day with a maintenance window, waits and SLO
compliance per day, pending reasons over time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from chargeback.ops.selectors import capacity_over_time, pending_over_time, queue_waits, slo_share
from queues.admission import MaintenanceState
from queues.admission.testing import node, reservation, running, snapshot
from queues.models import (
    CapacityHour,
    CapacitySample,
    GpuClass,
    JobState,
    PendingSample,
    Queue,
    QueueWaitDay,
)
from queues.reconcile.history import (
    capacity_hours_rollup,
    class_capacity_and_holders,
    wait_day_compute,
    wait_days_refresh,
)
from tests.factories import JobFactory

D = Decimal
DAY = datetime(2026, 11, 2, tzinfo=UTC)


def by_class(snap):
    return {c.gpu_class: c for c in class_capacity_and_holders(snap)[0]}


def test_24_free_h100s_and_no_8_gpu_slot():
    # Four 8-GPU nodes with 2 GPUs held on each: 24 free, but at most 6 on any one node.
    nodes = [node(f"h{i}") for i in range(4)]
    jobs = [running(i + 1, "vision", f"h{i}", gpus=2) for i in range(4)]

    h100 = by_class(snapshot(nodes=nodes, running=jobs))["h100-80gb"]

    assert (h100.in_use, h100.free) == (8, 24)
    assert h100.largest_free == 6
    assert [h100.slots(n) for n in (1, 2, 4, 8)] == [24, 12, 4, 0]


def test_each_gpu_is_in_exactly_one_state():
    nodes = [
        node("ok", gpus=8, outside_gpu_eq=Fraction(1)),
        node("sick", gpus=8, healthy=False, outside_gpu_eq=Fraction(2)),
        node("drained", gpus=8, maintenance=MaintenanceState.DRAINING),
    ]
    jobs = [
        running(1, "vision", "ok", gpus=3, reservation_id=7),
        running(2, "nlp", "drained", gpus=4),  # still running on a drained node: maintenance
    ]
    snap = snapshot(nodes=nodes, running=jobs, reservations=[reservation(7, "vision", 5)])

    h100 = by_class(snap)["h100-80gb"]

    # ok: 8 - 1 outside = 7, 3 held, 4 free of which 2 reserved (5 reserved - 3 used).
    assert (h100.in_use, h100.free, h100.reserved_idle) == (3, 2, 2)
    assert (h100.unhealthy, h100.maintenance, h100.outside) == (6, 8, 3)
    assert (
        sum(
            (
                h100.in_use,
                h100.free,
                h100.reserved_idle,
                h100.unhealthy,
                h100.maintenance,
                h100.outside,
            )
        )
        == 24
    )
    # Only in-service exclusive nodes offer slots: 4 free whole GPUs on "ok".
    assert h100.free_whole == [4]


@pytest.mark.django_db
def test_allocation_over_a_day_with_a_maintenance_window(example_policy):
    # One 8-GPU node, 4 GPUs in use all day; 06:00-12:00 it is in maintenance (its 8 GPUs
    # count there, the 4 held among them). Allocatable: 8 GPUs × 18 h = 144 GPU-h; in use:
    # 4 × 18 = 72 GPU-h → 50 %; maintenance 8 × 6 = 48 GPU-h.
    l4 = GpuClass.objects.get(name="l4")
    rows = []
    for minute in range(24 * 60):
        at = DAY + timedelta(minutes=minute)
        down = 6 * 60 <= minute < 12 * 60
        rows.append(
            CapacitySample(
                at=at,
                gpu_class=l4,
                in_use=D(0) if down else D(4),
                free=D(0) if down else D(4),
                maintenance=D(8) if down else D(0),
            )
        )
    CapacitySample.objects.bulk_create(rows)

    [day] = capacity_over_time(start=DAY, end=DAY + timedelta(days=1), bucket="day")
    hours = capacity_over_time(start=DAY, end=DAY + timedelta(days=1), bucket="hour")

    assert day.gpu_class == "l4"
    assert (day.hours["in_use"], day.allocatable, day.hours["maintenance"]) == (
        D("72.000"),
        D("144.000"),
        D("48.000"),
    )
    assert day.allocation == D("50.0")
    assert len(hours) == 24
    assert hours[7].allocation is None  # in maintenance the whole hour: nothing allocatable
    assert (hours[13].hours["in_use"], hours[13].allocation) == (D("4.000"), D("50.0"))
    # Once the reconcile has rolled the hours up, the same numbers come from 24 rows, not 1440.
    capacity_hours_rollup(now=DAY + timedelta(days=1, minutes=5))
    assert CapacityHour.objects.count() == 24
    assert CapacityHour.objects.get(hour=DAY + timedelta(hours=7)).minutes == 60
    CapacitySample.objects.filter(at__lt=DAY + timedelta(hours=23)).delete()
    assert capacity_over_time(start=DAY, end=DAY + timedelta(days=1), bucket="day") == [day]
    assert capacity_over_time(start=DAY, end=DAY + timedelta(days=1), bucket="hour") == hours


@pytest.mark.django_db
def test_wait_percentiles_and_slo_compliance_of_a_day(example_policy, mia):
    # interactive's target is 5 min. Ten jobs admitted on the day waited 1..10 minutes:
    # p50 (nearest rank, 5th of 10) = 5 min, p90 (9th) = 9 min; 5 of 10 within target = 50 %.
    interactive = Queue.objects.get(name="interactive")
    assert interactive.expected_wait_target == timedelta(minutes=5)
    for minutes in range(1, 11):
        admitted = DAY + timedelta(hours=10, minutes=minutes * 3)
        JobFactory(
            owner=mia,
            queue=interactive,
            submitted_at=admitted - timedelta(minutes=minutes),
            admitted_at=admitted,
            state=JobState.SUCCEEDED,
        )
    # Admitted the day before: not counted.
    JobFactory(
        owner=mia,
        queue=interactive,
        submitted_at=DAY - timedelta(hours=2),
        admitted_at=DAY - timedelta(minutes=1),
        state=JobState.SUCCEEDED,
    )

    rows = {r.queue.name: r for r in wait_day_compute(day=DAY.date(), now=DAY + timedelta(days=1))}

    day = rows["interactive"]
    assert (day.admitted, day.within_target) == (10, 5)
    assert (day.wait_p50, day.wait_p90) == (timedelta(minutes=5), timedelta(minutes=9))
    assert slo_share(day) == D("50.0")
    assert rows["batch"].admitted == 0 and slo_share(rows["batch"]) is None


@pytest.mark.django_db
def test_past_days_are_rolled_up_once_and_today_each_minute(example_policy, mia):
    interactive = Queue.objects.get(name="interactive")
    JobFactory(
        owner=mia,
        queue=interactive,
        submitted_at=DAY + timedelta(hours=1),
        admitted_at=DAY + timedelta(hours=1, minutes=10),
        state=JobState.SUCCEEDED,
    )
    now = DAY + timedelta(days=1, hours=3)

    wait_days_refresh(now=now)

    yesterday = QueueWaitDay.objects.get(queue=interactive, day=DAY.date())
    assert (yesterday.admitted, yesterday.within_target) == (1, 0)
    assert (
        QueueWaitDay.objects.filter(day=date(2026, 11, 3)).count() == Queue.objects.active().count()
    )
    waits = {w.queue: w for w in queue_waits(since=DAY.date())}
    assert [d.day for d in waits["interactive"].days] == [date(2026, 11, 2), date(2026, 11, 3)]


@pytest.mark.django_db
def test_pending_reasons_over_time_average_the_sampled_minutes(example_policy):
    l4 = GpuClass.objects.get(name="l4")
    batch = Queue.objects.get(name="batch")
    # Ten minutes sampled in the hour; 3 jobs wait on quota in the first 5, 1 in the rest:
    # (3 × 5 + 1 × 5) / 10 = 2.0 on average.
    for minute in range(10):
        at = DAY + timedelta(minutes=minute)
        CapacitySample.objects.create(at=at, gpu_class=l4)
        PendingSample.objects.create(
            at=at, queue=batch, code="QuotaExceeded", jobs=3 if minute < 5 else 1
        )

    series = pending_over_time(start=DAY, end=DAY + timedelta(hours=1), bucket="hour")

    assert series == {"QuotaExceeded": [(DAY, D("2.0"))]}


def test_a_minute_between_a_long_queues_refreshes_keeps_the_last_refreshs_pending_counts(
    example_policy,
):
    """Cycles between full refreshes explain only new jobs and cannot count the queue; the
    minute they start gets the last refresh's counts (refreshes come up to a minute apart),
    not nothing: the dashboard would show no job waiting until the next refresh."""
    from queues import admission as engine
    from queues.reconcile.history import history_record
    from queues.reconcile.snapshot import snapshot_build

    batch = Queue.objects.get(name="batch")
    refreshed = DAY + timedelta(minutes=1)
    PendingSample.objects.create(at=refreshed, queue=batch, code="QuotaExceeded", jobs=4200)
    PendingSample.objects.create(at=refreshed, queue=batch, code="Priority", jobs=17)
    later = DAY + timedelta(minutes=2, seconds=30)
    snap = snapshot_build(now=later, forecasts=False)

    history_record(snap, engine.plan(snap, estimates=False, explain=set()), now=later)

    def counts(minute):
        return sorted(PendingSample.objects.filter(at=minute).values_list("code", "jobs"))

    assert counts(DAY + timedelta(minutes=2)) == [("Priority", 17), ("QuotaExceeded", 4200)]
    much_later = DAY + timedelta(minutes=9)  # the last refresh is too old to stand for it
    history_record(snap, engine.plan(snap, estimates=False, explain=set()), now=much_later)
    assert counts(much_later) == []
    # a full plan counts the queue itself (here: nobody waits)
    history_record(snap, engine.plan(snap), now=later)
    assert counts(DAY + timedelta(minutes=2)) == []


def test_team_stats_rewrite_only_the_teams_whose_numbers_moved(example_policy):
    """Each cycle stores every team's GPUs held and decayed usage; a team whose numbers did not
    move keeps its row (only marked computed now), so 2,000 teams are not rewritten per cycle."""
    import dataclasses

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from queues import admission as engine
    from queues.models import TeamStats
    from queues.reconcile.history import history_record
    from queues.reconcile.snapshot import snapshot_build

    snap = snapshot_build(now=DAY, forecasts=False)
    history_record(snap, engine.plan(snap, estimates=False, explain=set()), now=DAY)
    teams = TeamStats.objects.count()
    assert teams == len(snap.teams) > 1
    vision = next(t for t in snap.teams if t.name == "vision")
    moved = dataclasses.replace(
        snap,
        teams=tuple(
            dataclasses.replace(t, recent_usage=Fraction(5, 2)) if t is vision else t
            for t in snap.teams
        ),
    )
    later = DAY + timedelta(minutes=1)

    with CaptureQueriesContext(connection) as queries:
        history_record(moved, engine.plan(moved, estimates=False, explain=set()), now=later)

    upserts = [q["sql"] for q in queries if 'INSERT INTO "queues_teamstats"' in q["sql"]]
    assert len(upserts) == 1 and upserts[0].count("), (") == 0  # one row: vision's
    stats = {s.team.name: s for s in TeamStats.objects.select_related("team")}
    assert stats["vision"].recent_usage == D("2.500")
    assert {s.computed_at for s in stats.values()} == {later}
