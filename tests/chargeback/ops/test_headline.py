"""The /ops/ headline's arithmetic and its recommendations (chargeback.ops.headline), computed by
hand: each recommendation has a fixture that must produce it, word for word, and one that must
not."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from chargeback.ops.headline import (
    ClassWeek,
    ReservationWeek,
    TeamClassDuty,
    fragmentation_recommendations,
    headline_rows,
    low_duty_recommendations,
    reservation_recommendations,
    wait_target_recommendations,
    week_bounds,
)
from chargeback.ops.selectors import QueueWaits
from queues.admission.drain import DrainAdvice
from queues.admission.testing import NOW

D = Decimal


def test_a_class_week_by_hand():
    # 8 GPUs × 168 h = 1344 allocatable; 1008 in use → 75.0 %. Busy 504 of 1008 measured →
    # 50.0 %. Lost: 2.5 preempted + 1.25 failed + 504 idle + 40 reserved idle + 12 stranded
    # = 559.750. 45 of 60 admitted jobs within target → 75.0 %.
    week = ClassWeek(
        gpu_class="a100-80gb",
        in_use=D("1008.000"),
        allocatable=D("1344.000"),
        reserved_idle=D("40.000"),
        stranded=D("12.000"),
        busy=D("504.000"),
        idle=D("504.000"),
        preempted=D("2.500"),
        failed=D("1.250"),
        admitted=60,
        within_target=45,
        waiting=D("3.4"),
    )
    assert week.allocated_percent == D("75.0")
    assert week.busy_percent == D("50.0")
    assert week.lost == D("559.750")
    assert week.lost_parts == {
        "preemption": D("2.500"),
        "failures": D("1.250"),
        "idle allocations": D("504.000"),
        "reserved, idle": D("40.000"),
        "stranded": D("12.000"),
    }
    assert week.slo_percent == D("75.0")


def test_an_empty_week_says_nothing_rather_than_zero_percent():
    empty = ClassWeek("l4")
    assert (empty.allocated_percent, empty.busy_percent, empty.slo_percent) == (None, None, None)
    assert empty.lost == D("0.000")


def test_unmeasured_duty_counts_no_idle_hours():
    week = ClassWeek("l4", busy=None, idle=None, reserved_idle=D("3.000"))
    assert week.busy_percent is None and week.lost == D("3.000")


def test_rows_pair_this_week_with_last_by_class():
    rows = headline_rows(
        [ClassWeek("t4", in_use=D(1), allocatable=D(4)), ClassWeek("a100-80gb")],
        [ClassWeek("t4", in_use=D(2), allocatable=D(4)), ClassWeek("l4", stranded=D(5))],
    )
    assert [r.gpu_class for r in rows] == ["a100-80gb", "l4", "t4"]
    t4 = rows[2]
    assert (t4.this.allocated_percent, t4.last.allocated_percent) == (D("25.0"), D("50.0"))
    assert rows[1].this == ClassWeek("l4") and rows[1].lost_change == D("-5")


def test_the_week_starts_on_the_hour_seven_days_back():
    last, this, end = week_bounds(NOW + timedelta(minutes=17, seconds=3))
    assert this == NOW - timedelta(days=7)
    assert last == NOW - timedelta(days=14)
    assert end == NOW + timedelta(minutes=17, seconds=3)


# --- (a) a reservation idle while jobs waited ---------------------------------------------------


def test_an_idle_reservation_while_jobs_waited_is_advice():
    # 8 GPUs × 168 h = 1344 reserved GPU-h; 390 used → 954 idle = 70.98 % → 71 %.
    week = ReservationWeek(
        name="t3-a100",
        gpu_class="a100",
        amount=D("8.000"),
        reserved_gpu_hours=D("1344.000"),
        used_gpu_hours=D("390.000"),
        jobs_waited=8,
    )
    [rec] = reservation_recommendations([week])
    assert rec.text == (
        "t3-a100: 8 GPUs idle 71 % of the week while 8 jobs waited for a100 — lend it to "
        "preemptible work or shrink it"
    )
    assert (rec.kind, rec.url_name, rec.url_args) == (
        "reservation-idle",
        "operations:reservation-edit",
        ("t3-a100",),
    )


def test_a_busy_reservation_or_one_nobody_waited_for_is_not_advice():
    base = dict(name="r", gpu_class="l4", amount=D(4), reserved_gpu_hours=D("672.000"))
    busy = ReservationWeek(**base, used_gpu_hours=D("337.000"), jobs_waited=5)  # 49.9 % idle
    unwanted = ReservationWeek(**base, used_gpu_hours=D("0.000"), jobs_waited=0)
    assert reservation_recommendations([busy, unwanted]) == []


# --- (b) low duty cycle on big GPUs -------------------------------------------------------------


def test_big_gpus_mostly_idle_are_advice():
    # 1.2 busy of 10 measured GPU-h → 12 %
    [rec] = low_duty_recommendations(
        [TeamClassDuty("vision", "h100-80gb", D("1.200"), D("8.800"), shared=False, big=True)]
    )
    assert rec.text == (
        "team vision: h100-80gb jobs 12 % busy over 10.000 GPU-hours this week — a MIG or "
        "time-sliced class would serve them"
    )
    assert (rec.url_name, rec.url_args) == ("operations:quota-edit", ("vision", "h100-80gb"))


def test_busy_small_shared_or_brief_use_is_not_advice():
    assert (
        low_duty_recommendations(
            [
                TeamClassDuty("nlp", "h100-80gb", D("3.000"), D("7.000"), False, True),  # 30 %
                TeamClassDuty("nlp", "l4", D("0.100"), D("9.900"), False, False),  # not big
                TeamClassDuty("nlp", "a100-80gb", D("0"), D("5"), True, True),  # time-sliced
                TeamClassDuty("nlp", "a100-80gb", D("0.1"), D("0.8"), False, True),  # < 1 GPU-h
            ]
        )
        == []
    )


# --- (c) free GPUs no waiting shape can use -----------------------------------------------------


def test_stranded_gpus_name_the_node_to_drain():
    advice = DrainAdvice(
        gpu_class="h100-80gb",
        free=24,
        pods=1,
        devices=8,
        jobs=2,
        node="h100-07",
        ends_at=NOW + timedelta(minutes=19, seconds=1),
        now=NOW,
    )
    [rec] = fragmentation_recommendations([advice])
    assert rec.text == (
        "24 h100-80gb GPUs free, no 8-GPU slot (2 jobs waiting) — drain h100-07 for 20 min "
        "to make one"
    )
    assert rec.href == (
        "/manage/maintenance/?nodes=h100-07&reason=make+room+for+1+%C3%97+8+GPUs+%28fragmentation%29"
    )


def test_no_stranded_gpus_no_advice():
    assert fragmentation_recommendations([]) == []


# --- (d) queues past their wait target ----------------------------------------------------------


def test_a_queue_past_its_target_is_advice_and_one_within_is_not():
    late = QueueWaits(
        queue="training",
        target=timedelta(hours=4),
        wait_p50=timedelta(hours=1),
        wait_p90=timedelta(hours=5, minutes=10),
        pending=3,
    )
    on_time = QueueWaits(
        queue="batch",
        target=timedelta(hours=2),
        wait_p50=timedelta(minutes=5),
        wait_p90=timedelta(hours=2),
        pending=9,
    )
    [rec] = wait_target_recommendations([late, on_time])
    assert rec.text == (
        "queue training: p90 wait 5h10m against a target of 4h, 3 jobs waiting — add capacity "
        "or quota for it, or publish a target it can keep"
    )
    assert rec.href == "/manage/policy/queues/training/"
    assert wait_target_recommendations([on_time]) == []


def test_a_reservation_watched_part_of_the_week_says_how_long_and_minutes_say_nothing():
    base = dict(name="t3-a100", gpu_class="a100", amount=D(8), used_gpu_hours=D(0), jobs_waited=1)
    # watched for 2 h 30 min: 8 × 2.5 = 20 reserved GPU-h, all idle
    [rec] = reservation_recommendations(
        [ReservationWeek(**base, reserved_gpu_hours=D(20), span=timedelta(hours=2, minutes=30))]
    )
    assert rec.text == (
        "t3-a100: 8 GPUs idle 100 % of the 2h30m it was in force this week while 1 job waited "
        "for a100 — lend it to preemptible work or shrink it"
    )
    brief = ReservationWeek(**base, reserved_gpu_hours=D(8), span=timedelta(minutes=59))
    assert reservation_recommendations([brief]) == []
