"""Stories: what users and admins see the engine do."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from queues.admission import (
    PROBE_USER,
    CapacityKind,
    EstimatedStart,
    MigSlots,
    PendingJob,
    ReasonCode,
    default_probe,
    explain,
    plan,
)
from queues.admission.testing import (
    CAPABILITIES,
    GPU_CLASSES,
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


def without_history(at: datetime) -> EstimatedStart:
    """A later start when no job has runtime history: likely and its interval are the bound."""
    return EstimatedStart(at=at, likely=at, range_low=at, range_high=at)


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
    assert status.binding.hint == "preempting job 1 (grace 5 min); starts by 2025-03-03 12:05 UTC"

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


def test_explain_tries_at_most_max_trials_what_ifs_and_says_how_many_it_left_out() -> None:
    def explained(max_trials: int | None):
        return explain(
            snapshot(
                nodes=[node("n1"), node("n2")],
                teams=[team("vision", {H100: (8, 8)})],
                running=[running(1, "vision", "n1", 8, queue="interactive")],
                pending=[pending(10, "vision", "interactive", gpus=2)],
            ),
            10,
            max_trials=max_trials,
        )

    every = explained(None)

    # 19 what-ifs keep the job as asked (every other queue × capability class of team vision
    # whose GPUs meet its own class); batch's come first by name, and of the batch ones that
    # start it now, the job's own capability class is the one suggested (one per queue).
    assert every.untried == 0
    assert [(a.queue, a.capability) for a in every.alternatives] == [("batch", "any-gpu")]
    assert explained(0).untried == 19 and explained(0).alternatives == ()
    # With 2 tried (batch × a100, batch × any-40gb), the best of those two is offered.
    assert explained(2).untried == 17
    assert [(a.queue, a.capability) for a in explained(2).alternatives] == [("batch", "a100")]
    assert explained(19) == every


# ---------------------------------------------------------------------- probes


def probe_for(queue_name: str, team_name: str, probe_id: int, **fields: object) -> PendingJob:
    """The default probe of a standard queue, optionally reshaped."""
    terms = next(q for q in STANDARD_QUEUES if q.name == queue_name)
    probe = default_probe(
        terms, team_name, NOW, probe_id, gpu_classes=GPU_CLASSES, capability_classes=CAPABILITIES
    )
    assert probe is not None
    return dataclasses.replace(probe, **fields)


def test_a_probe_on_an_idle_cluster_starts_now() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 8})],
            probes=[probe_for("training", "vision", 1)],
        )
    )
    assert result.admissions == () and result.pending == ()
    assert result.probe_estimates == ((1, EstimatedStart(at=NOW)),)
    assert result.to_dict()["probe_estimates"] == [
        {
            "job_id": 1,
            "estimated_start": {
                "at": "2025-03-03T12:00:00+00:00",
                "likely": None,
                "why_unknown": "",
                "range_low": None,
                "range_high": None,
            },
        }
    ]


def test_a_probe_behind_a_running_job_that_fills_the_class_starts_when_that_job_must_end() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 8, runtime=timedelta(hours=4))],
            probes=[probe_for("training", "vision", 1)],
        )
    )
    # started an hour ago with a 4 h limit
    assert result.probe_estimate(1) == without_history(NOW + timedelta(hours=3))


def test_a_probe_waits_behind_real_jobs_ahead_of_it_and_delays_none() -> None:
    cluster = {
        "nodes": [node("n1")],
        "teams": [team("vision", {H100: 16})],
        "running": [running(1, "vision", "n1", 8, runtime=timedelta(hours=4))],
        "pending": [
            pending(10, "vision", "training", gpus=8, runtime_limit=timedelta(hours=2)),
            pending(11, "vision", "batch", gpus=1),
        ],
    }
    probes = [
        probe_for("training", "vision", 1),  # behind job 10, submitted earlier
        probe_for("interactive", "vision", 2),  # a higher-priority queue: ahead of job 10
        probe_for("batch", "vision", 10),  # ids may repeat real ones; answers stay apart
    ]
    without = plan(snapshot(**cluster))
    result = plan(snapshot(**cluster, probes=probes))

    assert [(job_id, e.at) for job_id, e in result.probe_estimates] == [
        (1, NOW + timedelta(hours=5)),  # job 10 runs 15:00-17:00 on the whole node
        (2, NOW + timedelta(hours=3)),
        (10, NOW + timedelta(hours=5)),
    ]
    assert dataclasses.replace(result, probe_estimates=()) == without
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=3)  # type: ignore[union-attr]


def test_a_probe_does_not_hold_back_the_jobs_behind_it_so_they_may_go_first() -> None:
    """Unlike a real job in its place, a probe sets no EASY shadow: the smaller job behind it is
    admitted now, and the probe's estimate waits for it too."""
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 4, runtime=timedelta(hours=4))],
            pending=[pending(10, "vision", "training", gpus=2)],
            probes=[probe_for("interactive", "vision", 1, gpus_per_pod=8)],
        )
    )
    assert [a.job_id for a in result.admissions] == [10]
    # job 1 ends at 15:00, job 10 (8 h default runtime) at 20:00
    assert result.probe_estimate(1) == without_history(NOW + timedelta(hours=8))


def test_a_probe_that_can_never_start_says_why() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 4})],
            probes=[
                probe_for("training", "vision", 1, gpus_per_pod=8),
                probe_for("training", "vision", 2, capability="no-such-class"),
            ],
        )
    )
    assert result.probe_estimate(1) == EstimatedStart(
        at=None,
        why_unknown=(
            "can never start: h100-80gb: needs 8; team vision may hold at most 4 "
            "(nominal 4; queue training may not borrow)"
        ),
    )
    assert result.probe_estimate(2) == EstimatedStart(
        at=None, why_unknown="capability class no-such-class does not exist"
    )
    assert result.probe_estimate(3) is None


def test_probe_ids_must_be_unique() -> None:
    probe = probe_for("training", "vision", 1)
    with pytest.raises(ValueError, match="unique"):
        snapshot(probes=[probe, probe])


def test_the_default_probe_is_one_device_of_the_cheapest_allowed_class_at_the_default_runtime() -> (
    None
):
    catalog = {"gpu_classes": GPU_CLASSES, "capability_classes": CAPABILITIES}
    training = default_probe(STANDARD_QUEUES[1], "vision", NOW, 7, **catalog)
    assert training == PendingJob(
        id=7,
        queue="training",
        team="vision",
        user=PROBE_USER,
        capability="any-gpu",  # the first capability (by name) that matches t4-16gb
        submitted_at=NOW,
    )
    assert training.runtime_limit is None and (training.pods, training.gpus_per_pod) == (1, 1)

    big = queue("big", gpu_classes=("a100-40gb", H100), capability_classes=("h100", "any-40gb"))
    assert default_probe(big, "vision", NOW, 1, **catalog).capability == "any-40gb"  # type: ignore[union-attr]

    mig = queue("mig", sharing="mig", capability_classes=("mig-3g", "mig-1g", "any-gpu"))
    assert default_probe(mig, "vision", NOW, 1, **catalog).capability == "mig-1g"  # type: ignore[union-attr]
    assert (
        default_probe(
            queue("mig", sharing="mig", capability_classes=("any-gpu",)),
            "vision",
            NOW,
            1,
            **catalog,
        )
        is None
    )

    notebooks = queue("notebooks", sharing="time-sliced", gpu_classes=("l4-24gb",))
    sliced = default_probe(notebooks, "vision", NOW, 1, **catalog)
    assert sliced is not None and (sliced.capability, sliced.gpus_per_pod) == ("any-gpu", 1)

    with pytest.raises(ValueError, match="team vision may not submit to queue private"):
        default_probe(queue("private", teams=("nlp",)), "vision", NOW, 1, **catalog)


def test_mig_and_time_sliced_probes_take_one_slice_or_replica() -> None:
    catalog = {"gpu_classes": GPU_CLASSES, "capability_classes": CAPABILITIES}
    mig = queue("mig", sharing="mig", default_runtime=timedelta(hours=2))
    notebooks = queue("notebooks", sharing="time-sliced")
    probes = [
        default_probe(mig, "vision", NOW, 1, **catalog),
        default_probe(notebooks, "vision", NOW, 2, **catalog),
    ]
    result = plan(
        snapshot(
            queues=[mig, notebooks],
            nodes=[
                node("m1", mig=(MigSlots("1g.10gb", 1),)),
                node("l1", "l4-24gb", gpus=1, time_slice_replicas=4),
            ],
            teams=[team("vision", {H100: 1, "l4-24gb": 1})],
            running=[
                running(1, "vision", "m1", Fraction(1, 7), queue="mig", mig_profile="1g.10gb"),
            ],
            probes=probes,
        )
    )
    assert result.probe_estimate(1) == without_history(NOW + timedelta(hours=3))
    assert result.probe_estimate(2) == EstimatedStart(at=NOW)


# ---------------------------------------------------------------------- jobs that never fit


def test_a_gang_beyond_its_teams_quota_on_every_class_never_fits_with_the_numbers() -> None:
    """The 4 × 8-GPU job of team nlp: nominal 8 + borrowing 16 allow 24 H100s, and it needs 32.
    It says NeverFits, has no estimated start and no range from others' waits, and holds back
    nothing for itself."""
    queues = [queue("training", preemption="graceful", may_borrow=True, gpu_classes=("h100-80gb",))]
    result = plan(
        snapshot(
            nodes=[node(f"h{i}") for i in range(6)],
            queues=queues,
            teams=[team("nlp", {"h100-80gb": (8, 16)}), team("vision", {"h100-80gb": 8})],
            pending=[
                pending(10, "nlp", gpus=8, pods=4, waited=timedelta(minutes=20)),
                pending(11, "vision", gpus=8, waited=timedelta(minutes=5)),
            ],
        )
    )
    status = result.status(10)
    assert status is not None
    [reason] = status.reasons
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.message == (
        "can never start: h100-80gb: needs 32; team nlp may hold at most 24 "
        "(nominal 8 + borrowing 16)"
    )
    assert reason.details == {
        "gpu_classes": {
            "h100-80gb": "needs 32; team nlp may hold at most 24 (nominal 8 + borrowing 16)"
        },
        "requested": {"h100-80gb": 32},
        "most_entitled": {"h100-80gb": 24},
        "team": "nlp",
        "quota_class": "h100-80gb",
    }
    assert (
        reason.hint
        == "ask for at most 24 GPU-equivalents (h100-80gb), or ask an admin for more quota"
    )
    assert (status.estimated_start.at, status.estimated_start.range_low) == (None, None)
    assert status.estimated_start.why_unknown == reason.message
    # the job behind it is not held back by a job that can never run
    assert [a.job_id for a in result.admissions] == [11]


def test_the_binding_reason_is_for_the_class_that_frees_first() -> None:
    """Both classes are full; the A100s free in 3 h, the H100s in 1 h: the H100's reasons bind,
    whatever the order the capability class lists them in."""
    result = plan(
        snapshot(
            nodes=[node("a1", "a100-40gb", 4), node("h1", "h100-80gb", 4)],
            teams=[team("vision", {"a100-40gb": 4, "h100-80gb": 4})],
            running=[
                running(1, "vision", "a1", 4, gpu_class="a100-40gb", runtime=timedelta(hours=4)),
                running(2, "vision", "h1", 4, runtime=timedelta(hours=2)),
            ],
            pending=[pending(10, "vision", "training", "any-40gb", gpus=4)],
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.estimated_start.at == NOW + timedelta(hours=1)
    assert status.binding.details["gpu_class"] == "h100-80gb"
    assert [r.details.get("gpu_class") for r in status.reasons] == [
        "h100-80gb",
        "h100-80gb",
        "a100-40gb",
        "a100-40gb",
    ]


# ---------------------------------------------------------------------- terminating pods


def test_gpus_held_by_terminating_pods_are_not_free_and_are_no_victims() -> None:
    """A cancelled job's pods hold its 8 GPUs until they are gone (its grace, from now): a job
    needing them waits that long, and nothing preempts pods that are already stopping."""
    stopping = running(
        1,
        "vision",
        "h1",
        8,
        queue="batch",
        started=timedelta(0),
        runtime=timedelta(minutes=10),
        terminating=True,
    )
    result = plan(
        snapshot(
            nodes=[node("h1")],
            teams=[team("vision", {"h100-80gb": 8}), team("nlp", {"h100-80gb": 8})],
            running=[stopping],
            pending=[pending(10, "nlp", gpus=8)],
        )
    )
    assert result.admissions == ()
    assert result.preemptions == ()
    status = result.status(10)
    assert status is not None
    assert status.binding.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert status.estimated_start.at == NOW + timedelta(minutes=10)


def _team_batch_on_one_node(*extra_pending: PendingJob, stopped: bool = False):
    """Team nlp's batch jobs of 4, 2 and 1 GPUs fill an 8-GPU node that has 1 GPU used outside
    the portal; with ``stopped`` the 4-GPU one was preempted a minute ago (5 min grace)."""
    first = running(
        1, "nlp", "h1", 4, queue="batch", started=timedelta(minutes=30), runtime=timedelta(hours=2)
    )
    if stopped:
        first = dataclasses.replace(
            first,
            started_at=NOW - timedelta(minutes=1),
            runtime_limit=timedelta(minutes=5),
            terminating=True,
        )
    return snapshot(
        nodes=[node("h1", outside_gpu_eq=Fraction(1))],
        teams=[team("nlp", {H100: (8, 4)})],
        running=[
            first,
            running(2, "nlp", "h1", 2, queue="batch", runtime=timedelta(hours=2)),
            running(3, "nlp", "h1", 1, queue="batch", runtime=timedelta(hours=2)),
        ],
        pending=[
            pending(10, "nlp", "interactive", "h100", waited=timedelta(minutes=2)),
            *extra_pending,
        ],
    )


def test_gpus_of_a_job_preempted_in_this_pass_go_to_no_other_job_until_its_pods_are_gone() -> None:
    """Interactive job 10 takes 1 of the 4 GPUs batch job 1 frees; the other 3 stay held by
    job 1's stopping pods through its 5 min grace, so job 11 is not admitted onto them now (the
    node would hold 9 of 8 GPUs) and waits for them rather than preempting more batch work."""
    result = plan(
        _team_batch_on_one_node(
            pending(11, "nlp", "interactive", "h100", waited=timedelta(minutes=1))
        )
    )
    assert [(p.job_id, p.for_job) for p in result.preemptions] == [(1, 10)]
    assert result.admissions == ()
    first, second = result.status(10), result.status(11)
    assert first is not None and first.preempting == (1,)
    assert first.estimated_start.at == NOW + timedelta(minutes=5)
    assert second is not None and second.preempting == ()
    assert second.binding.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert second.estimated_start.at == NOW + timedelta(minutes=5)


def test_a_job_waits_for_pods_already_stopping_rather_than_preempting_more() -> None:
    """The next cycle: job 1's pods are still stopping (4 more minutes). Job 10, which preempted
    it, and job 11 both fit once they are gone: neither preempts batch jobs 2 or 3."""
    result = plan(
        _team_batch_on_one_node(
            pending(11, "nlp", "interactive", "h100", waited=timedelta(minutes=1)), stopped=True
        )
    )
    assert result.preemptions == ()
    assert result.admissions == ()
    for job_id in (10, 11):
        status = result.status(job_id)
        assert status is not None and status.preempting == ()
        assert status.estimated_start.at == NOW + timedelta(minutes=4)


def test_memory_running_notebooks_declared_is_a_wait_with_the_numbers_not_never() -> None:
    """A T4 shared by 4 replicas with a 12 GB notebook running: an 8 GB notebook waits for it
    (InsufficientCapacity, GB declared and GB free, an estimate at the notebook's limit); it
    was told NeverFits "do not fit its 1 node even when they are empty"."""
    notebooks = queue("notebooks", sharing="time-sliced")
    result = plan(
        snapshot(
            queues=[notebooks],
            nodes=[node("t1", "t4-16gb", gpus=1, time_slice_replicas=4)],
            teams=[team("vision", {"t4-16gb": 1})],
            running=[
                running(
                    1,
                    "vision",
                    "t1",
                    Fraction(1, 4),
                    queue="notebooks",
                    gpu_class="t4-16gb",
                    memory_gb=12,
                    started=timedelta(hours=1),
                    runtime=timedelta(hours=3),
                )
            ],
            pending=[pending(2, "vision", "notebooks", memory_gb=8)],
        )
    )

    status = result.status(2)
    assert status is not None
    assert status.binding.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert status.binding.message == (
        "needs 8 GB of declared GPU memory per pod on a time-sliced t4-16gb node; "
        "at most 4 GB is undeclared on any node with free replicas"
    )
    assert status.estimated_start is not None
    assert status.estimated_start.at == NOW + timedelta(hours=2)
