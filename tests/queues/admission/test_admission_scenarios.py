"""Stories: what users and admins see the engine do."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from queues.admission import CapacityKind, ReasonCode, explain, plan
from queues.admission.testing import (
    NOW,
    STANDARD_QUEUES,
    node,
    pending,
    queue,
    reservation,
    running,
    snapshot,
    team,
)

H100 = "h100-80gb"
ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_engine_loads_no_django_or_kubernetes() -> None:
    code = (
        "import queues.admission, sys; "
        "assert not any(m.split('.')[0] in ('django', 'kubernetes') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_an_interactive_user_blocked_by_quota_is_told_to_use_batch_which_may_borrow() -> None:
    cluster = {
        "nodes": [node("n1"), node("n2")],
        "teams": [team("vision", {H100: (8, 8)})],
        "running": [running(1, "vision", "n1", 8, queue="interactive", user="bob")],
    }
    waiting = plan(snapshot(**cluster, pending=[pending(10, "vision", "interactive", gpus=2)]))

    [reason] = waiting.status(10).reasons  # type: ignore[union-attr]
    assert reason.code is ReasonCode.QUOTA_EXCEEDED
    assert reason.message == (
        "team vision: h100-80gb quota 8/8 in use (needs 2); queue interactive may not borrow"
    )
    assert reason.hint == (
        "queue `batch` may borrow idle h100-80gb GPUs beyond your quota "
        "(graceful: it can be preempted, so checkpoint)"
    )

    resubmitted = plan(snapshot(**cluster, pending=[pending(11, "vision", "batch", gpus=2)]))
    [admission] = resubmitted.admissions
    assert (admission.job_id, admission.capacity, admission.nodes) == (
        11,
        CapacityKind.BORROWED,
        ("n2",),
    )


def test_a_training_gang_waits_on_fragmentation_until_a_whole_node_frees() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n2"), node("n3")],
            teams=[team("nlp", {H100: 24}), team("vision", {H100: 8})],
            running=[
                running(1, "vision", "n1", 4, runtime=timedelta(hours=2)),
                running(2, "vision", "n2", 2, runtime=timedelta(hours=5)),
                running(3, "vision", "n3", 2, runtime=timedelta(hours=7)),
            ],
            pending=[pending(10, "nlp", "training", gpus=8, pods=2)],
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.binding.code is ReasonCode.FRAGMENTATION
    assert status.binding.message == (
        "needs 2 pods × 8 GPUs; 16 free across 3 nodes (largest block 6)"
    )
    # n1 frees at 13:00 but the gang needs two whole nodes: n2 frees at 16:00
    assert status.estimated_start.at == NOW + timedelta(hours=4)


def test_an_inference_reservation_reclaims_its_gpus_from_borrowing_batch_work() -> None:
    queues = (
        *[q for q in STANDARD_QUEUES if q.name != "batch"],
        queue(
            "batch",
            priority=10,
            preemption="preemptible",
            grace_period=timedelta(minutes=5),
            may_borrow=True,
        ),
    )
    cluster = {
        "queues": queues,
        "nodes": [node("n1")],
        "teams": [team("serving"), team("vision", {H100: (0, 8)})],
        "reservations": [reservation(5, "serving", 8, queue="inference")],
    }
    # The reservation sat idle, so preemptible batch work borrowed its GPUs.
    batch = running(
        1,
        "vision",
        "n1",
        8,
        queue="batch",
        kind="borrowed",
        started=timedelta(minutes=50),
        checkpoint_interval=timedelta(minutes=30),
    )
    result = plan(
        snapshot(**cluster, running=[batch], pending=[pending(10, "serving", "inference", gpus=8)])
    )

    [preemption] = result.preemptions
    assert preemption.job_id == 1
    assert preemption.grace_period == timedelta(minutes=5)
    assert preemption.lost_work == timedelta(minutes=20)
    assert preemption.reason == (
        "reservation 5 of team serving reclaims its h100-80gb GPUs for job 10 (queue inference); "
        "lost work 20 min"
    )
    status = result.status(10)
    assert status is not None and status.preempting == (1,)
    assert status.estimated_start.at == NOW + timedelta(minutes=5)
    assert status.binding.hint == "preempting job 1 (grace 5 min); starts by 12:05 UTC"

    # After the grace period the batch job is requeued and inference runs on its reservation.
    later = NOW + timedelta(minutes=5)
    inference = running(
        10,
        "serving",
        "n1",
        8,
        queue="inference",
        kind="reserved",
        reservation_id=5,
        started=timedelta(0),
    )
    inference = dataclasses.replace(inference, started_at=later, runtime_limit=timedelta(hours=24))
    requeued = dataclasses.replace(pending(1, "vision", "batch", gpus=8, attempts=1))
    after = plan(snapshot(**cluster, now=later, running=[inference], pending=[requeued]))
    assert after.admissions == ()
    waiting = after.status(1)
    assert waiting is not None
    assert waiting.binding.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert waiting.estimated_start.at == later + timedelta(hours=24)


def test_preemption_picks_the_fewest_victims_that_lose_the_least_work() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("nlp", {H100: 4}), team("vision", {H100: (4, 4)})],
            running=[
                running(1, "vision", "n1", 2, queue="training"),
                running(
                    2,
                    "vision",
                    "n1",
                    2,
                    queue="batch",
                    kind="borrowed",
                    started=timedelta(minutes=45),
                    checkpoint_interval=timedelta(minutes=30),
                ),
                running(
                    3,
                    "vision",
                    "n1",
                    2,
                    queue="batch",
                    kind="borrowed",
                    started=timedelta(minutes=35),
                    checkpoint_interval=timedelta(minutes=30),
                ),
                running(
                    4,
                    "vision",
                    "n1",
                    2,
                    queue="batch",
                    kind="borrowed",
                    started=timedelta(minutes=70),
                    checkpoint_interval=timedelta(minutes=30),
                ),
            ],
            pending=[pending(10, "nlp", "training", gpus=2)],
        )
    )
    # job 3 lost 5 minutes since its assumed checkpoint, job 4 10, job 2 15: one victim is enough
    assert [(p.job_id, p.lost_work) for p in result.preemptions] == [(3, timedelta(minutes=5))]
    assert result.status(10).preempting == (3,)  # type: ignore[union-attr]


def test_never_preemptible_work_is_not_preempted() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("nlp", {H100: 8}), team("vision", {H100: 8})],
            running=[running(1, "vision", "n1", 8, queue="training")],
            pending=[pending(10, "nlp", "training", gpus=8)],
        )
    )
    assert result.preemptions == ()
    assert result.status(10).binding.code is ReasonCode.INSUFFICIENT_CAPACITY  # type: ignore[union-attr]


def test_the_cheapest_matching_class_goes_first_unless_that_delays_the_job() -> None:
    cluster = {
        "nodes": [node("t1", "t4-16gb", gpus=1), node("h1", H100, gpus=8)],
        "teams": [team("vision", {"t4-16gb": 4, H100: 8})],
    }
    result = plan(snapshot(**cluster, pending=[pending(10, "vision"), pending(11, "vision")]))
    assert [(a.job_id, a.gpu_class) for a in result.admissions] == [(10, "t4-16gb"), (11, H100)]


def test_higher_priority_queues_go_first_then_fair_share() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=2)],
            teams=[team("heavy", {H100: 8}, usage=900), team("light", {H100: 8}, usage=10)],
            pending=[
                pending(1, "heavy", "training", waited=timedelta(hours=5)),
                pending(2, "light", "training", waited=timedelta(minutes=1)),
                pending(3, "heavy", "interactive", waited=timedelta(minutes=1)),
            ],
        )
    )
    assert [a.job_id for a in result.admissions] == [3, 2]
    assert result.status(1).position == 1  # type: ignore[union-attr]


def test_time_sliced_jobs_share_a_gpu_while_declared_memory_fits() -> None:
    notebooks = queue("notebooks", sharing="time-sliced")
    result = plan(
        snapshot(
            queues=[notebooks],
            nodes=[node("l1", "l4-24gb", gpus=1, time_slice_replicas=4)],
            teams=[team("vision", {"l4-24gb": 1})],
            pending=[pending(i, "vision", "notebooks", memory_gb=10) for i in range(1, 4)],
        )
    )
    assert [a.job_id for a in result.admissions] == [1, 2]
    assert [str(a.gpu_eq) for a in result.admissions] == ["1/4", "1/4"]
    status = result.status(3)
    assert status is not None and status.binding.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert status.binding.message == (
        "needs 10 GB of declared GPU memory per pod on a time-sliced l4-24gb node; "
        "at most 4 GB is undeclared on any node with free replicas"
    )


def test_the_plan_is_json_serialisable() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 4})],
            pending=[pending(1, "vision", gpus=2), pending(2, "vision", gpus=4)],
        )
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["admissions"][0]["gpu_eq"] == 2
    assert data["pending"][0]["reasons"][0]["code"] == "QuotaExceeded"


def test_explain_finds_a_queue_that_would_start_the_job_now() -> None:
    result = explain(
        snapshot(
            nodes=[node("n1"), node("n2")],
            teams=[team("vision", {H100: (8, 8)})],
            running=[running(1, "vision", "n1", 8, queue="interactive")],
            pending=[pending(10, "vision", "interactive", gpus=2)],
        ),
        10,
    )
    assert result.status is not None
    assert result.status.binding.code is ReasonCode.QUOTA_EXCEEDED
    assert ("batch", "any-gpu", True) in [
        (a.queue, a.capability, a.admitted_now) for a in result.alternatives
    ]
    assert all(a.queue == "batch" for a in result.alternatives if a.admitted_now)
