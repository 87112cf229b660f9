"""Borrowing beyond nominal quota: what a team uses within its guarantee and what it borrows.

A job is admitted wholly as nominal or borrowed (a borrowed job is reclaimed as a whole), but the
quota numbers people read are split by amount: a borrowed job fills its team's unused nominal
room first, and only the rest is borrowed.
"""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

from queues.admission import CapacityKind, GpuClass, GpuClassSpec, ReasonCode, plan
from queues.admission.testing import (
    ALL,
    CAPABILITIES,
    GPU_CLASSES,
    node,
    pending,
    running,
    snapshot,
    team,
)

A100 = "a100-80gb"
H100 = "h100-80gb"
CLASSES = (*GPU_CLASSES, GpuClass(GpuClassSpec(A100, 80, ALL, tier=3), Fraction(3)))

# vision: a100-80gb quota nominal 4, borrowing limit 4; nlp holds the rest of the two nodes
VISION = {
    "gpu_classes": CLASSES,
    "capability_classes": CAPABILITIES,
    "nodes": [node("a1", A100), node("a2", A100)],
    "teams": [team("nlp", {A100: 12}), team("vision", {A100: (4, 4)})],
}


def first_job(**fields: object) -> object:
    """The 8-GPU vision batch job, running as borrowed on a1 since an hour ago."""
    return running(1, "vision", "a1", 8, queue="batch", gpu_class=A100, kind="borrowed", **fields)


def test_a_job_beyond_the_nominal_quota_is_borrowed_but_records_only_the_excess() -> None:
    result = plan(snapshot(**VISION, pending=[pending(1, "vision", "batch", gpus=8)]))

    [admission] = result.admissions
    assert (admission.job_id, admission.capacity) == (1, CapacityKind.BORROWED)
    assert (admission.gpu_eq, admission.borrowed_gpu_eq) == (8, 4)
    assert admission.to_dict()["borrowed_gpu_eq"] == 4


def test_a_job_within_the_nominal_quota_borrows_nothing() -> None:
    result = plan(snapshot(**VISION, pending=[pending(1, "vision", "batch", gpus=4)]))

    [admission] = result.admissions
    assert (admission.capacity, admission.borrowed_gpu_eq) == (CapacityKind.NOMINAL, 0)


def test_the_second_job_sees_the_quota_and_the_borrowing_used_up_with_true_numbers() -> None:
    result = plan(
        snapshot(**VISION, running=[first_job()], pending=[pending(2, "vision", "batch", gpus=8)])
    )

    [reason] = result.status(2).reasons  # type: ignore[union-attr]
    assert reason.code is ReasonCode.QUOTA_EXCEEDED
    assert reason.message == (
        "team vision: a100-80gb quota 4/4 in use, borrowing 4/4 in use (needs 8)"
    )
    assert reason.details == {
        "team": "vision",
        "gpu_class": A100,
        "nominal": 4,
        "nominal_in_use": 4,
        "borrowing_limit": 4,
        "borrowed_in_use": 4,
        "requested": 8,
        "queue_may_borrow": True,
    }
    assert reason.hint == (
        "your team's a100-80gb quota frees up when job 1 ends, at the latest 2025-03-03 15:00 UTC"
    )


def test_a_queue_that_may_not_borrow_sees_the_same_split_and_when_it_frees() -> None:
    result = plan(
        snapshot(
            **VISION, running=[first_job()], pending=[pending(2, "vision", "training", gpus=2)]
        )
    )

    [reason] = result.status(2).reasons  # type: ignore[union-attr]
    assert reason.code is ReasonCode.QUOTA_EXCEEDED
    assert reason.message == (
        "team vision: a100-80gb quota 4/4 in use, borrowing 4/4 in use (needs 2); "
        "queue training may not borrow"
    )
    assert (reason.details["nominal_in_use"], reason.details["borrowed_in_use"]) == (4, 4)
    assert reason.hint == (
        "your team's a100-80gb quota frees up when job 1 ends, at the latest 2025-03-03 15:00 UTC"
    )


def test_borrowing_partly_used_shows_what_is_left() -> None:
    six = running(1, "vision", "a1", 6, queue="batch", gpu_class=A100, kind="borrowed")
    result = plan(
        snapshot(**VISION, running=[six], pending=[pending(2, "vision", "batch", gpus=4)])
    )

    [reason] = result.status(2).reasons  # type: ignore[union-attr]
    assert reason.message == (
        "team vision: a100-80gb quota 4/4 in use, borrowing 2/4 in use (needs 4)"
    )
    assert (reason.details["nominal_in_use"], reason.details["borrowed_in_use"]) == (4, 2)


def test_use_beyond_a_lowered_quota_is_shown_apart_never_as_in_use_above_the_limits() -> None:
    lowered = {**VISION, "teams": [team("nlp", {A100: 12}), team("vision", {A100: (2, 2)})]}
    result = plan(
        snapshot(**lowered, running=[first_job()], pending=[pending(2, "vision", "batch")])
    )

    [reason] = result.status(2).reasons  # type: ignore[union-attr]
    assert reason.message == (
        "team vision: a100-80gb quota 2/2 in use, borrowing 2/2 in use, "
        "4 more beyond quota + borrowing limit (needs 1)"
    )
    assert reason.details["nominal_in_use"] == 2
    assert reason.details["borrowed_in_use"] == 2
    assert reason.details["above_quota_in_use"] == 4
    assert reason.hint == (
        "your team's a100-80gb quota frees up when job 1 ends, at the latest 2025-03-03 15:00 UTC"
    )


def test_a_lender_reclaims_a_partly_borrowed_job_as_a_whole() -> None:
    # one node: vision's 8-GPU job is 4 within its quota and 4 borrowed from nlp
    cluster = {
        **VISION,
        "nodes": [node("a1", A100)],
        "teams": [team("nlp", {A100: 4}), team("vision", {A100: (4, 4)})],
    }
    result = plan(
        snapshot(
            **cluster,
            running=[first_job()],
            pending=[pending(10, "nlp", "training", gpus=4)],
        )
    )

    [preemption] = result.preemptions
    assert preemption.job_id == 1
    assert preemption.reason == (
        "team nlp reclaims its nominal a100-80gb quota for job 10 (queue training); "
        "lost work 1 h 0 min"
    )
    assert result.status(10).preempting == (1,)  # type: ignore[union-attr]


def test_borrowed_jobs_of_a_team_within_its_nominal_quota_are_not_reclaimed() -> None:
    # Both vision jobs were admitted as borrowed while vision's other work ran; now vision uses
    # 8 of its nominal 8, so it borrows nothing. nlp is short because pods outside the portal
    # hold 4 GPUs of n2, not because vision borrows: vision keeps its guarantee.
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n2", outside_gpu_eq=Fraction(4))],
            teams=[team("nlp", {H100: 8}), team("vision", {H100: (8, 8)})],
            running=[
                running(1, "vision", "n1", 4, queue="batch", kind="borrowed"),
                running(2, "vision", "n1", 4, queue="batch", kind="borrowed"),
            ],
            pending=[pending(10, "nlp", "training", gpus=8)],
        )
    )

    assert result.preemptions == ()
    status = result.status(10)
    assert status is not None and status.preempting == ()
    assert status.binding.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_a_lender_takes_no_more_jobs_from_a_team_than_cover_what_it_borrows() -> None:
    # vision uses 12 of nominal 8: it borrows 4. Job 3 (least lost work) covers that; jobs 1 and
    # 2 then run within vision's quota, and taking them would be the only way to fit nlp's
    # 8-GPU pod on n1, so nlp waits instead.
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n2", outside_gpu_eq=Fraction(4))],
            teams=[team("nlp", {H100: 8}), team("vision", {H100: (8, 8)})],
            running=[
                running(1, "vision", "n1", 4, queue="batch", kind="borrowed"),
                running(2, "vision", "n1", 4, queue="batch", kind="borrowed"),
                running(
                    3,
                    "vision",
                    "n2",
                    4,
                    queue="batch",
                    kind="borrowed",
                    started=timedelta(minutes=5),
                ),
            ],
            pending=[pending(10, "nlp", "training", gpus=8)],
        )
    )

    assert result.preemptions == ()
    status = result.status(10)
    assert status is not None and status.binding.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_a_lender_still_reclaims_while_the_borrowing_team_borrows() -> None:
    # the same cluster without the outside pods: job 3 alone frees n2 for nlp
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n2")],
            teams=[team("nlp", {H100: 8}), team("vision", {H100: (8, 8)})],
            running=[
                running(1, "vision", "n1", 4, queue="batch", kind="borrowed"),
                running(2, "vision", "n1", 4, queue="batch", kind="borrowed"),
                running(
                    3,
                    "vision",
                    "n2",
                    4,
                    queue="batch",
                    kind="borrowed",
                    started=timedelta(minutes=5),
                ),
                running(4, "nlp", "n2", 4),
            ],
            pending=[pending(10, "nlp", "training", gpus=4)],
        )
    )

    assert [p.job_id for p in result.preemptions] == [3]


def test_jobs_within_their_teams_quota_come_before_jobs_that_would_borrow() -> None:
    # One 8-GPU A100 node; vision and nlp each hold a nominal 4 and may borrow 4. Vision ranks
    # first in fair share, and its second job would borrow nlp's idle 4. Like Kueue, which
    # admits a cohort's non-borrowing workloads first, nlp's job within its quota goes ahead of
    # it: otherwise vision would borrow the GPUs now and nlp would reclaim them by preemption
    # at the next cycle.
    result = plan(
        snapshot(
            gpu_classes=CLASSES,
            capability_classes=CAPABILITIES,
            nodes=[node("a1", A100)],
            teams=[team("vision", {A100: (4, 4)}), team("nlp", {A100: (4, 4)}, usage=100)],
            pending=[
                pending(1, "vision", "batch", gpus=4, waited=timedelta(minutes=3)),
                pending(2, "vision", "batch", gpus=4, waited=timedelta(minutes=2)),
                pending(3, "nlp", "batch", gpus=4, waited=timedelta(minutes=1)),
            ],
        )
    )
    assert sorted((a.job_id, a.capacity) for a in result.admissions) == [
        (1, CapacityKind.NOMINAL),
        (3, CapacityKind.NOMINAL),
    ]
    waiting = result.status(2)
    assert waiting is not None and waiting.position == 1
    assert waiting.binding.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_a_probe_that_fits_the_quota_ahead_of_a_later_job_is_not_counted_as_borrowing() -> None:
    # Vision may hold 4 (and borrow 4); one 4-GPU node is free. A high-priority probe comes
    # before vision's waiting 4-GPU job in order, so it fits the nominal quota and would start
    # now, as a real job in its place would; the waiting job then would borrow.
    start = snapshot(
        gpu_classes=CLASSES,
        capability_classes=CAPABILITIES,
        nodes=[node("a1", A100, gpus=4)],
        teams=[team("vision", {A100: (4, 4)})],
        pending=[pending(1, "vision", "batch", gpus=4)],
        probes=(pending(900, "vision", "batch", gpus=4, priority=10),),
    )
    result = plan(start)
    estimate = result.probe_estimate(900)
    assert estimate is not None and estimate.at == start.now
    assert [a.job_id for a in result.admissions] == [1]
