"""One small hand-built snapshot per pending reason code: the exact reason, numbers and hint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from queues.admission import MaintenanceState, MigSlots, PendingReason, Plan, ReasonCode, plan
from queues.admission.testing import (
    NOW,
    node,
    pending,
    queue,
    reservation,
    running,
    snapshot,
    team,
)

H100 = "h100-80gb"


def reasons_of(result: Plan, job_id: int) -> list[PendingReason]:
    status = result.status(job_id)
    assert status is not None, f"job {job_id} is not pending"
    return list(status.reasons)


def test_it_lists_exactly_the_product_codes() -> None:
    assert [code.value for code in ReasonCode] == [
        "NoMatchingGpuClass",
        "MigProfileUnavailable",
        "QuotaExceeded",
        "UserLimit",
        "InsufficientCapacity",
        "ReservedCapacity",
        "Fragmentation",
        "Topology",
        "Unhealthy",
        "Maintenance",
        "Priority",
        "ReservationWindow",
        "ClusterUnschedulable",
        "ContainerConfigError",  # admitted, but a Secret or key its pods reference is missing
        "ClusterUnreachable",
        "NeverFits",
        "Provisioning",  # fits only on a node a node pool is adding (test_admission_elastic.py)
    ]


def test_no_matching_gpu_class_names_each_rejection_and_a_capability_that_fits() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", "l4-24gb")],
            queues=[queue("interactive", gpu_classes=("l4-24gb",))],
            teams=[team("vision", {"l4-24gb": 8})],
            pending=[pending(10, "vision", "interactive", "h100")],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.NO_MATCHING_GPU_CLASS
    assert reason.message == (
        "capability class h100 matches no GPU class queue interactive allows "
        "(a100-40gb: HBM 40 GB < 80 GB required; lacks fp8; "
        "h100-80gb: queue interactive does not allow it; "
        "l4-24gb: HBM 24 GB < 80 GB required; "
        "t4-16gb: HBM 16 GB < 80 GB required; lacks fp8)"
    )
    assert reason.details["allowed_classes"] == ["l4-24gb"]
    assert reason.details["rejections"]["h100-80gb"] == "queue interactive does not allow it"
    assert (
        reason.hint == "capability class `any-gpu` matches l4-24gb, which queue interactive allows"
    )
    assert result.status(10).estimated_start.at is None  # type: ignore[union-attr]


def test_mig_profile_unavailable_counts_free_slices() -> None:
    result = plan(
        snapshot(
            nodes=[node("m1", mig=(MigSlots("1g.10gb", 7), MigSlots("3g.40gb", 2)))],
            teams=[team("vision", {H100: 8})],
            running=[
                running(i, "vision", "m1", Fraction(1, 7), mig_profile="1g.10gb")
                for i in range(1, 8)
            ],
            pending=[pending(10, "vision", capability="mig-1g")],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.MIG_PROFILE_UNAVAILABLE
    assert reason.message == "needs 1 × 1g.10gb slice of h100-80gb; 0 free across 0 nodes"
    assert reason.details["profile"] == "1g.10gb"
    assert reason.details["free"] == 0
    assert reason.details["requested_gpu_eq"] == 0.1429
    assert (
        reason.hint
        == "1 more slice frees up by 2025-03-03 15:00 UTC as running jobs reach their runtime limits"
    )


def test_quota_exceeded_names_quota_and_borrowing_in_use() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n2"), node("n3")],
            teams=[team("vision", {H100: (16, 8)})],
            running=[
                running(1, "vision", ["n1", "n2"], 8),
                running(2, "vision", "n3", 8, queue="batch", kind="borrowed"),
            ],
            pending=[pending(10, "vision", "batch", gpus=2)],
        )
    )
    quota, capacity = reasons_of(result, 10)
    assert quota.code is ReasonCode.QUOTA_EXCEEDED
    assert quota.message == (
        "team vision: h100-80gb quota 16/16 in use, borrowing 8/8 in use (needs 2)"
    )
    assert quota.details == {
        "team": "vision",
        "gpu_class": "h100-80gb",
        "nominal": 16,
        "nominal_in_use": 16,
        "borrowing_limit": 8,
        "borrowed_in_use": 8,
        "requested": 2,
        "queue_may_borrow": True,
    }
    assert (
        quota.hint
        == "your team's h100-80gb quota frees up when job 1 ends, at the latest 2025-03-03 15:00 UTC"
    )
    assert capacity.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_user_limit_counts_running_jobs_and_says_when_one_ends() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            queues=[queue("interactive", max_running_jobs_per_user=1)],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 1, queue="interactive")],
            pending=[pending(10, "vision", "interactive")],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.USER_LIMIT
    assert reason.message == "user ann: 1/1 running jobs in queue interactive"
    assert reason.details == {
        "user": "ann",
        "queue": "interactive",
        "running_jobs": 1,
        "max_running_jobs": 1,
    }
    assert reason.hint == "your job 1 ends at the latest 2025-03-03 15:00 UTC"


def test_insufficient_capacity_counts_gpus_used_outside_the_portal() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4, outside_gpu_eq=Fraction(1))],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 2)],
            pending=[pending(10, "vision", gpus=2)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message == "needs 2 h100-80gb GPUs; 1 free (1 used outside the portal)"
    assert reason.details["free"] == 1
    assert reason.details["outside_gpu_eq"] == 1
    assert reason.details["capacity_gpu_eq"] == 4
    assert (
        reason.hint
        == "1 more GPU frees up by 2025-03-03 15:00 UTC as running jobs reach their runtime limits"
    )
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=3)  # type: ignore[union-attr]


def test_reserved_capacity_names_the_reservation_holding_the_free_gpus() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 4}), team("serving")],
            reservations=[reservation(5, "serving", 6, queue="inference")],
            running=[running(1, "vision", "n1", 2, runtime=timedelta(hours=2))],
            pending=[pending(10, "vision", gpus=2)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.RESERVED_CAPACITY
    assert reason.message == (
        "6 h100-80gb GPUs are free but 6 of them are reserved (reservation 5 of team serving); "
        "needs 2, 0 unreserved"
    )
    assert reason.details["reservations"] == [5]
    assert reason.details["unreserved_free"] == 0
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=1)  # type: ignore[union-attr]


def test_fragmentation_gives_the_largest_block_and_a_shape_that_fits() -> None:
    result = plan(
        snapshot(
            nodes=[node(f"n{i}", gpus=4) for i in range(1, 4)],
            teams=[team("vision", {H100: 16})],
            running=[running(i, "vision", f"n{i}", 2) for i in range(1, 4)],
            pending=[pending(10, "vision", gpus=4)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.FRAGMENTATION
    assert reason.message == "needs 4 GPUs on 1 node; 6 free across 3 nodes (largest block 2)"
    assert reason.details == {
        "gpu_class": "h100-80gb",
        "pods": 1,
        "per_pod": 4,
        "free": 6,
        "nodes_with_free": 3,
        "largest_block": 2,
    }
    assert reason.hint == "as 2 pods × 2 GPUs it would fit now"


def test_topology_when_the_gang_fits_only_across_racks() -> None:
    result = plan(
        snapshot(
            queues=[queue("training", required_topology="rack")],
            nodes=[node("a1", rack="ra"), node("b1", rack="rb")],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "a1", 4), running(2, "vision", "b1", 4)],
            pending=[pending(10, "vision", pods=2, gpus=4)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.TOPOLOGY
    assert reason.message == (
        "needs 2 pods × 4 GPUs within one rack; no rack has room (the best holds 1 pod), "
        "though they fit across racks"
    )
    assert reason.details["best_domain_pods"] == 1


def test_maintenance_binds_when_drained_nodes_hold_the_missing_gpus() -> None:
    result = plan(
        snapshot(
            nodes=[
                node("n1"),
                node(
                    "n2",
                    maintenance=MaintenanceState.DRAINING,
                    maintenance_reason="ECC errors",
                    maintenance_until=NOW + timedelta(hours=2),
                ),
                node("n3", healthy=False, health_reason="XID 79"),
            ],
            teams=[team("vision", {H100: 24})],
            running=[running(1, "vision", "n1", 8)],
            pending=[pending(10, "vision", gpus=4)],
        )
    )
    maintenance, unhealthy, capacity = reasons_of(result, 10)
    assert maintenance.code is ReasonCode.MAINTENANCE
    assert maintenance.message == (
        "1 of the 3 matching nodes is in maintenance (n2: ECC errors, back 2025-03-03 14:00 UTC); "
        "it holds 8 free GPUs"
    )
    assert maintenance.hint == "n2 is expected back at 2025-03-03 14:00 UTC"
    assert unhealthy.code is ReasonCode.UNHEALTHY
    assert capacity.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=2)  # type: ignore[union-attr]


def test_unhealthy_binds_when_only_broken_nodes_have_room() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1"), node("n3", healthy=False, health_reason="XID 79")],
            teams=[team("vision", {H100: 24})],
            running=[running(1, "vision", "n1", 8)],
            pending=[pending(10, "vision", gpus=4)],
        )
    )
    unhealthy, capacity = reasons_of(result, 10)
    assert unhealthy.code is ReasonCode.UNHEALTHY
    assert unhealthy.message == (
        "1 of the 2 matching nodes is unhealthy (n3: XID 79); it holds 8 free GPUs"
    )
    assert unhealthy.details["nodes"] == ["n3"]
    assert capacity.message == "needs 4 h100-80gb GPUs; 0 free"


def test_priority_binds_when_backfill_would_delay_the_job_ahead() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 24})],
            running=[running(1, "vision", "n1", 4, runtime=timedelta(hours=2))],
            pending=[
                pending(10, "vision", gpus=8, waited=timedelta(hours=1)),
                pending(11, "vision", gpus=4, runtime_limit=timedelta(hours=3)),
                pending(12, "vision", gpus=2, runtime_limit=timedelta(minutes=30)),
            ],
        )
    )
    assert [a.job_id for a in result.admissions] == [12]  # ends before job 10 can start
    assert result.admissions[0].backfilled
    [reason] = reasons_of(result, 11)
    assert reason.code is ReasonCode.PRIORITY
    assert reason.message == (
        "position 2 of 2 in queue training; the free GPUs are held for job 10 ahead of it, "
        "which starting this job would delay"
    )
    assert reason.details == {
        "queue": "training",
        "position": 2,
        "queue_length": 2,
        "held_for_job": 10,
    }
    assert reason.hint == "estimated start 2025-03-03 21:00 UTC"
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=1)  # type: ignore[union-attr]


def test_reservation_window_says_when_the_reservation_opens() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("serving")],
            reservations=[
                reservation(
                    5,
                    "serving",
                    8,
                    queue="inference",
                    start=NOW + timedelta(hours=2),
                    end=NOW + timedelta(hours=10),
                    name="launch-week",
                )
            ],
            pending=[pending(10, "serving", "inference", gpus=2)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.RESERVATION_WINDOW
    # Named as people know it (it said "reservation 5"); the id stays in the details.
    assert (
        reason.message
        == "team serving's reservation launch-week (h100-80gb) starts 2025-03-03 14:00 UTC"
    )
    assert reason.details["starts_at"] == "2025-03-03T14:00:00+00:00"
    assert reason.details["reservation_id"] == 5
    assert (
        reason.hint
        == "the job can start when reservation launch-week opens at 2025-03-03 14:00 UTC"
    )
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=2)  # type: ignore[union-attr]


def test_cluster_unschedulable_keeps_the_scheduler_message_for_admitted_jobs() -> None:
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 8})],
            running=[running(1, "vision", "n1", 2, started=None, unschedulable=message)],
        )
    )
    [(job_id, (reason,))] = result.admitted_reasons
    assert job_id == 1
    assert reason.code is ReasonCode.CLUSTER_UNSCHEDULABLE
    assert reason.message == f"admitted, but the cluster's scheduler cannot place a pod: {message}"
    assert reason.details == {"scheduler_message": message}


def test_cluster_unreachable_binds_first_and_admits_nothing() -> None:
    result = plan(
        snapshot(
            cluster_unreachable_since=NOW - timedelta(minutes=7),
            nodes=[node("n1")],
            teams=[team("vision", {H100: 8})],
            pending=[pending(10, "vision"), pending(11, "vision", gpus=8)],
        )
    )
    assert result.admissions == ()
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.CLUSTER_UNREACHABLE
    assert reason.message == "the portal cannot reach the cluster since 2025-03-03 11:53 UTC"
    assert reason.details == {"since": "2025-03-03T11:53:00+00:00"}
    assert [r.code for r in reasons_of(result, 11)][:2] == [
        ReasonCode.CLUSTER_UNREACHABLE,
        ReasonCode.QUOTA_EXCEEDED,
    ]


# ---------------------------------------------------------------------- taints

A100 = "a100-40gb"
PERF = ("dedicated=perf:NoSchedule",)


def tainted_cluster(**overrides: object) -> dict[str, object]:
    """An exclusive A100 node half used by the team, and an H100 node tainted for perf work."""
    cluster: dict[str, object] = {
        "nodes": [node("a100-1", A100), node("h100-perf", H100, taints=PERF)],
        "queues": [
            queue("training", preemption="graceful", may_borrow=True, gpu_classes=(A100, H100))
        ],
        "teams": [team("vision", {A100: (4, 4), H100: 8})],
        "running": [running(1, "vision", "a100-1", 4, gpu_class=A100)],
        "pending": [pending(10, "vision", gpus=8)],
    }
    cluster.update(overrides)
    return cluster


def test_free_gpus_only_on_untolerated_nodes_name_the_taint_not_fragmentation() -> None:
    result = plan(snapshot(**tainted_cluster()))
    # The A100s free first (job 1 ends): their reasons bind; the H100s never take it.
    quota, capacity, taint = reasons_of(result, 10)
    assert taint.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert taint.message == (
        "8 free h100-80gb GPUs are only on nodes with taints queue training does not tolerate "
        "(h100-perf: dedicated=perf:NoSchedule); needs 8"
    )
    assert taint.details == {
        "gpu_class": H100,
        "queue": "training",
        "unit": "GPU",
        "requested": 8,
        "free": 0,
        "tainted_free": 8,
        "tainted_free_gpu_eq": 8,
        "nodes": ["h100-perf"],
        "taints": {"h100-perf": ["dedicated=perf:NoSchedule"]},
    }
    assert taint.hint == ""  # no queue of the team tolerates it: nothing true to propose
    assert quota.code is ReasonCode.QUOTA_EXCEEDED
    assert capacity.message == "needs 8 a100-40gb GPUs; 4 free"
    # the A100 frees when job 1 ends; the H100 never takes it
    assert result.status(10).estimated_start.at == NOW + timedelta(hours=3)  # type: ignore[union-attr]


def test_the_taint_hint_names_a_queue_of_the_team_that_tolerates_it() -> None:
    queues = [
        queue("training", preemption="graceful", may_borrow=True, gpu_classes=(A100, H100)),
        queue("perf", tolerations=("dedicated",), gpu_classes=(H100,)),
        queue("closed", tolerations=("dedicated",), teams=("nlp",)),
    ]
    result = plan(snapshot(**tainted_cluster(queues=queues)))
    taint = next(r for r in reasons_of(result, 10) if "taints" in r.message)
    assert taint.hint == "queue `perf` tolerates the taints on h100-perf"

    moved = plan(
        snapshot(**tainted_cluster(queues=queues, pending=[pending(10, "vision", "perf", gpus=8)]))
    )
    assert [(a.job_id, a.nodes) for a in moved.admissions] == [(10, ("h100-perf",))]


def test_fragmentation_is_claimed_only_over_nodes_the_queue_tolerates() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4), node("n2", gpus=4), node("h100-perf", gpus=4, taints=PERF)],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 2), running(2, "vision", "n2", 2)],
            pending=[pending(10, "vision", gpus=4)],
        )
    )
    fragmentation, taint = reasons_of(result, 10)
    assert fragmentation.code is ReasonCode.FRAGMENTATION
    assert (
        fragmentation.message == "needs 4 GPUs on 1 node; 4 free across 2 nodes (largest block 2)"
    )
    assert fragmentation.details["free"] == 4
    assert fragmentation.hint == "as 2 pods × 2 GPUs it would fit now"
    assert taint.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert taint.message == (
        "4 of the 8 free h100-80gb GPUs are on nodes with taints queue training does not "
        "tolerate (h100-perf: dedicated=perf:NoSchedule); needs 4, 4 free on the others"
    )


def test_a_shortage_the_tainted_nodes_do_not_cover_stays_a_plain_shortage() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4), node("h100-perf", gpus=1, taints=PERF)],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 3)],
            pending=[pending(10, "vision", gpus=4)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message == (
        "needs 4 h100-80gb GPUs; 1 free; 1 more on nodes with taints queue training does not "
        "tolerate (h100-perf: dedicated=perf:NoSchedule)"
    )
    assert reason.details["free"] == 1
    assert reason.details["tainted_free"] == 1
    assert reason.details["tainted_nodes"] == ["h100-perf"]
    assert reason.details["capacity_gpu_eq"] == 4  # the nodes the queue may use


def test_a_pod_larger_than_any_node_never_fits_and_says_how_large_they_are() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4), node("h100-perf", gpus=2, taints=PERF)],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "n1", 2)],
            pending=[pending(10, "vision", gpus=8)],
        )
    )
    status = result.status(10)
    assert status is not None
    [reason] = status.reasons
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.message == (
        "can never start: h100-80gb: 1 pod × 8 GPUs do not fit its 2 nodes even when they are "
        "empty (at most 4 GPUs a node)"
    )
    assert reason.details == {
        "gpu_classes": {
            H100: "1 pod × 8 GPUs do not fit its 2 nodes even when they are empty "
            "(at most 4 GPUs a node)"
        },
        "requested": {H100: 8},
    }
    assert reason.hint == (
        "ask for a shape the nodes can hold: fewer GPUs per pod, or less CPU or memory"
    )
    assert status.estimated_start.at is None
    assert status.estimated_start.why_unknown == reason.message
    assert status.estimated_start.range_low is None  # no "range from recent waits"


def test_a_job_that_fits_only_tainted_nodes_says_so_as_why_its_start_is_unknown() -> None:
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4), node("h100-perf", taints=PERF)],
            teams=[team("vision", {H100: 16})],
            running=[running(1, "vision", "h100-perf", 2, queue="perf")],
            pending=[pending(10, "vision", gpus=8)],
        )
    )
    status = result.status(10)
    assert status is not None
    # one pod of 8 fits only the tainted node: it never starts in this queue
    assert status.binding.code is ReasonCode.NEVER_FITS
    assert status.binding.message == (
        "can never start: h100-80gb: 1 pod × 8 GPUs fit only with nodes that carry taints queue "
        "training does not tolerate (h100-perf: dedicated=perf:NoSchedule); the other node holds "
        "at most 4 GPUs"
    )
    assert status.estimated_start.why_unknown == status.binding.message


def test_capacity_details_count_only_the_pool_the_request_can_use() -> None:
    """A MIG-partitioned A100 next to a100-1: its slices are no capacity for 8 whole GPUs."""
    mig_node = node("a100-mig", A100, mig=(MigSlots("1g.5gb", 28), MigSlots("3g.20gb", 8)))
    nodes = [node("a100-1", A100), mig_node, node("h100-perf", H100, taints=PERF)]
    result = plan(snapshot(**tainted_cluster(nodes=nodes)))
    capacity = next(
        r
        for r in reasons_of(result, 10)
        if r.details.get("gpu_class") == A100 and r.code is ReasonCode.INSUFFICIENT_CAPACITY
    )
    assert capacity.message == "needs 8 a100-40gb GPUs; 4 free"
    assert capacity.details == {
        "gpu_class": A100,
        "requested": 8,
        "free": 4,
        "unit": "GPU",
        "requested_gpu_eq": 8,
        "free_gpu_eq": 4,
        "capacity_gpu_eq": 8,
        "outside_gpu_eq": 0,
    }


def test_a_drained_node_the_queue_could_never_use_is_not_blamed() -> None:
    drained = {
        "maintenance": MaintenanceState.DRAINING,
        "maintenance_reason": "kernel upgrade",
        "maintenance_until": NOW + timedelta(hours=2),
    }
    cluster = {
        "teams": [team("vision", {H100: 24})],
        "running": [running(1, "vision", "n1", 8)],
        "pending": [pending(10, "vision", gpus=4)],
    }
    tainted = plan(snapshot(**cluster, nodes=[node("n1"), node("n2", taints=PERF, **drained)]))
    [reason] = reasons_of(tainted, 10)
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message == "needs 4 h100-80gb GPUs; 0 free"

    # a queue that tolerates every taint waits for it like for any drained node
    wildcard = [queue("training", tolerations=("*",))]
    tolerated = plan(
        snapshot(**cluster, queues=wildcard, nodes=[node("n1"), node("n2", taints=PERF, **drained)])
    )
    assert reasons_of(tolerated, 10)[0].message == (
        "1 of the 2 matching nodes is in maintenance (n2: kernel upgrade, back 2025-03-03 14:00 UTC); "
        "it holds 8 free GPUs"
    )


def test_mig_slices_on_untolerated_nodes_are_named_in_slices() -> None:
    result = plan(
        snapshot(
            queues=[queue("mig", sharing="mig")],
            nodes=[node("m1", mig=(MigSlots("1g.10gb", 7),), taints=PERF)],
            teams=[team("vision", {H100: 8})],
            pending=[pending(10, "vision", "mig", "mig-1g", gpus=2)],
        )
    )
    # Its only node carries a taint the queue does not tolerate: it can never start there.
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.message == (
        "can never start: h100-80gb: 1 pod × 2 slices fit only with nodes that carry taints "
        "queue mig does not tolerate (m1: dedicated=perf:NoSchedule); no other node"
    )
    assert reason.details["requested"] == {H100: 0.2857}


def test_a_job_held_back_after_roll_backs_waits_with_the_schedulers_words() -> None:
    said = "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    held = pending(
        10,
        "vision",
        gpus=8,
        rollbacks=2,
        not_before=NOW + timedelta(minutes=2),
        unschedulable=said,
    )
    result = plan(
        snapshot(
            nodes=[node("n1")],
            teams=[team("vision", {H100: 16})],
            pending=[held, pending(11, "vision", gpus=8, waited=timedelta(minutes=1))],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.CLUSTER_UNSCHEDULABLE
    assert reason.message == (
        f"rolled back 2 times in a row: the cluster could not start it; the scheduler "
        f"said: {said}; the portal tries again at 2025-03-03 12:02 UTC"
    )
    assert reason.details == {
        "scheduler_message": said,
        "rollbacks": 2,
        "not_before": (NOW + timedelta(minutes=2)).isoformat(),
    }
    assert reason.hint.startswith("if the scheduler's message names cpu or memory")
    # It holds nothing back: the job behind it takes the node.
    assert [a.job_id for a in result.admissions] == [11]
    # Its start: when the back-off ends and the node is free again (job 11 ends at its 8 h
    # limit). Without runtime history the likely start and its interval are that bound too.
    estimate = result.status(10).estimated_start  # type: ignore[union-attr]
    bound = NOW + timedelta(hours=8)
    assert (estimate.at, estimate.likely, estimate.range_low, estimate.range_high) == (
        bound,
        bound,
        bound,
        bound,
    )

    # The retry time is rounded up to the minute, never early.
    half = pending(10, "vision", gpus=8, rollbacks=1, not_before=NOW + timedelta(seconds=61))
    [reason] = reasons_of(
        plan(snapshot(nodes=[node("n1")], teams=[team("vision", {H100: 16})], pending=[half])), 10
    )
    assert reason.message == (
        "rolled back once: the cluster could not start it; the portal tries again at 2025-03-03 12:02 UTC"
    )
    # ... and so is the estimated start that goes with it, the node being free.
    estimate = plan(
        snapshot(nodes=[node("n1")], teams=[team("vision", {H100: 16})], pending=[half])
    ).status(10)
    assert estimate is not None
    assert estimate.estimated_start.at == NOW + timedelta(minutes=2)

    later = plan(
        snapshot(
            now=NOW + timedelta(minutes=2),
            nodes=[node("n1")],
            teams=[team("vision", {H100: 16})],
            pending=[held],
        )
    )
    assert [a.job_id for a in later.admissions] == [10]


def test_a_class_whose_nodes_are_all_too_small_for_the_pod_is_passed_over() -> None:
    a100 = "a100-40gb"
    nodes = [
        node("a1", a100, cpu_millicores=126_000, memory_mib=1_024_000),
        node("h1", cpu_millicores=190_000, memory_mib=1_945_600),
    ]
    teams = [team("vision", {H100: 8, a100: 8})]

    def one(cpu: int, memory: int = 4096) -> Plan:
        job = pending(10, "vision", "training", "any-40gb", cpu_millicores=cpu, memory_mib=memory)
        return plan(snapshot(nodes=nodes, teams=teams, pending=[job]))

    # a100-40gb is the cheaper class, and takes a pod its nodes can hold ...
    assert one(64_000).admissions[0].gpu_class == a100
    # ... but not one of 150 cores: the H100 node can, so the job goes there.
    assert one(150_000).admissions[0].gpu_class == H100

    [reason] = reasons_of(one(200_000, 2_000_000), 10)
    assert reason.code is ReasonCode.NO_MATCHING_GPU_CLASS
    assert reason.details["rejections"] == {
        a100: "its nodes allocate at most 126 CPU cores, a pod asks 200 CPU cores",
        H100: "its nodes allocate at most 190 CPU cores, a pod asks 200 CPU cores",
        "l4-24gb": "HBM 24 GB < 40 GB required",
        "t4-16gb": "HBM 16 GB < 40 GB required",
    }
    # Memory too: 1,500,000 MiB fits only the H100 node.
    assert one(100_000, 1_500_000).admissions[0].gpu_class == H100


def test_cpu_and_memory_must_fit_on_one_node_of_the_class() -> None:
    nodes = [
        node("h1", cpu_millicores=190_000, memory_mib=100_000),
        node("h2", cpu_millicores=16_000, memory_mib=1_000_000),
    ]
    job = pending(10, "vision", cpu_millicores=100_000, memory_mib=500_000)
    result = plan(snapshot(nodes=nodes, teams=[team("vision", {H100: 16})], pending=[job]))

    [reason] = reasons_of(result, 10)
    assert reason.details["rejections"][H100] == (
        "none of its nodes allocates both the 100 CPU cores and 500,000 MiB a pod asks"
    )
    assert reason.hint == (
        "node h1 (h100-80gb) allocates 190 CPU cores and 100,000 MiB memory: ask for at most "
        "that per pod"
    )


def test_a_node_that_does_not_say_its_size_holds_any_pod() -> None:
    job = pending(10, "vision", cpu_millicores=1_000_000, memory_mib=10_000_000)
    result = plan(snapshot(nodes=[node("h1")], teams=[team("vision", {H100: 8})], pending=[job]))
    assert [a.job_id for a in result.admissions] == [10]


def test_a_pod_skips_the_nodes_of_its_class_too_small_for_it() -> None:
    nodes = [
        node("h-big", cpu_millicores=190_000, memory_mib=1_945_600),
        node("h-small", cpu_millicores=16_000, memory_mib=1_945_600),
    ]
    teams = [team("vision", {H100: 16})]
    busy = [running(1, "vision", "h-big", 4)]  # best fit alone would pick h-big's 4 free GPUs
    job = pending(10, "vision", gpus=4, cpu_millicores=32_000)

    result = plan(snapshot(nodes=nodes, teams=teams, running=busy, pending=[job]))
    assert [(a.job_id, a.nodes) for a in result.admissions] == [(10, ("h-big",))]

    # A gang of two 8-GPU pods of 32 cores each: h-small has the GPUs, not the cores.
    gang = pending(11, "vision", gpus=8, pods=2, cpu_millicores=32_000, memory_mib=4096)
    result = plan(snapshot(nodes=nodes, teams=teams, pending=[gang]))
    [reason] = reasons_of(result, 11)
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.message == (
        "can never start: h100-80gb: 2 pods × 8 GPUs fit only with less CPU or memory per pod: "
        "1 of its 2 nodes cannot hold a pod of 32 CPU cores and 4,096 MiB"
    )
    assert reason.hint == (
        "node h-small (h100-80gb) allocates 16 CPU cores and 1,945,600 MiB memory: "
        "ask for at most that per pod"
    )
    estimate = result.status(11).estimated_start  # type: ignore[union-attr]
    assert estimate.at is None
    assert estimate.why_unknown == reason.message


def test_a_gang_puts_no_more_pods_on_a_node_than_its_cpu_holds() -> None:
    nodes = [
        node("h1", cpu_millicores=190_000, memory_mib=1_945_600),
        node("h2", cpu_millicores=190_000, memory_mib=1_945_600),
    ]
    teams = [team("vision", {H100: 16})]
    # Two pods of 4 GPUs and 120 cores: by GPUs both fit h1; by CPU one pod a node.
    gang = pending(10, "vision", gpus=4, pods=2, cpu_millicores=120_000, memory_mib=4096)

    result = plan(snapshot(nodes=nodes, teams=teams, pending=[gang]))
    assert [sorted(a.nodes) for a in result.admissions] == [["h1", "h2"]]

    # With h2 full, h1 alone has the GPUs for both but the cores for one.
    busy = [running(1, "vision", "h2", 8)]
    result = plan(snapshot(nodes=nodes, teams=teams, running=busy, pending=[gang]))
    [reason] = reasons_of(result, 10)
    assert reason.message == (
        "needs 2 pods × 4 GPUs on nodes that allocate 120 CPU cores and 4,096 MiB per pod; the "
        "free h100-80gb GPUs are on nodes without the CPU or memory for that (h1 holds 1 pod)"
    )
    assert reason.hint == (
        "ask for fewer CPU cores or less memory per pod, so that more of its pods fit a node"
    )


def test_a_shortage_counts_no_gpus_on_nodes_too_small_for_the_pod() -> None:
    nodes = [
        node("h-big", cpu_millicores=190_000, memory_mib=1_945_600),
        node("h-small", cpu_millicores=16_000, memory_mib=1_945_600),
    ]
    busy = [running(1, "vision", "h-big", 6), running(2, "vision", "h-small", 4)]
    job = pending(10, "vision", gpus=8, cpu_millicores=32_000, memory_mib=4096)

    result = plan(
        snapshot(nodes=nodes, teams=[team("vision", {H100: 32})], running=busy, pending=[job])
    )

    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message.startswith("needs 8 h100-80gb GPUs; 2 free")  # not h-small's 4 too
    assert reason.hint == (
        "6 more GPUs free up by 2025-03-03 15:00 UTC as running jobs reach their runtime limits"
    )


def test_the_hint_ignores_a_size_a_node_does_not_report() -> None:
    nodes = [
        node("h1", memory_mib=100_000),  # CPU not reported
        node("h2", cpu_millicores=8_000, memory_mib=90_000),
    ]
    job = pending(10, "vision", cpu_millicores=16_000, memory_mib=200_000)
    result = plan(snapshot(nodes=nodes, teams=[team("vision", {H100: 16})], pending=[job]))

    [reason] = reasons_of(result, 10)
    assert reason.hint == (
        "node h1 (h100-80gb) allocates 100,000 MiB memory: ask for at most that per pod"
    )


def test_jobs_behind_a_held_back_job_are_estimated_behind_it() -> None:
    held = pending(10, "vision", gpus=8, rollbacks=1, not_before=NOW + timedelta(minutes=2))
    now = pending(11, "vision", gpus=8, waited=timedelta(minutes=5))
    later = pending(12, "vision", gpus=8, waited=timedelta(minutes=4))
    result = plan(
        snapshot(nodes=[node("n1")], teams=[team("vision", {H100: 8})], pending=[held, now, later])
    )

    assert [a.job_id for a in result.admissions] == [11]
    starts = {s.job_id: s.estimated_start.at for s in result.pending}
    # Job 11 holds the node for its 8 h; then the held job, back in its place, goes first.
    assert starts == {10: NOW + timedelta(hours=8), 12: NOW + timedelta(hours=16)}


def test_a_job_that_can_never_start_gets_no_range_from_past_waits() -> None:
    queues = [queue("interactive", gpu_classes=("l4-24gb",), recent_waits=(timedelta(hours=1),))]
    result = plan(
        snapshot(
            nodes=[node("n1", "l4-24gb")],
            queues=queues,
            teams=[team("vision", {"l4-24gb": 8})],
            pending=[pending(10, "vision", "interactive", "h100")],
        )
    )
    estimate = result.status(10).estimated_start  # type: ignore[union-attr]
    assert (estimate.at, estimate.range_low, estimate.range_high) == (None, None, None)
    assert estimate.why_unknown.startswith("capability class h100 matches no GPU class")


def test_a_job_that_fits_only_tainted_nodes_and_only_smaller_says_both() -> None:
    nodes = [
        node("h-big", cpu_millicores=190_000, taints=("gpu-test:NoSchedule",)),
        node("h-small", cpu_millicores=16_000),
    ]
    job = pending(10, "vision", gpus=8, pods=2, cpu_millicores=32_000, memory_mib=4096)
    result = plan(snapshot(nodes=nodes, teams=[team("vision", {H100: 16})], pending=[job]))

    estimate = result.status(10).estimated_start  # type: ignore[union-attr]
    assert estimate.why_unknown == (
        "can never start: h100-80gb: 2 pods × 8 GPUs fit only with nodes that carry taints "
        "queue training does not tolerate (h-big: gpu-test:NoSchedule), and only with less CPU "
        "or memory per pod than 32 CPU cores and 4,096 MiB"
    )


def test_gpus_of_a_stopping_job_free_at_the_end_of_its_grace_period() -> None:
    """A cancelled job whose pods are still terminating holds its GPUs until its grace period
    ends; the waiting job is told so, with that time, not "as running jobs reach their runtime
    limits"."""
    result = plan(
        snapshot(
            nodes=[node("n1", gpus=4)],
            teams=[team("vision", {H100: 16})],
            running=[
                running(1, "vision", "n1", 2, runtime=timedelta(hours=4)),
                running(
                    2,
                    "vision",
                    "n1",
                    2,
                    started=timedelta(seconds=10),
                    runtime=timedelta(seconds=30),
                    terminating=True,
                ),
            ],
            pending=[pending(10, "vision", gpus=2)],
        )
    )
    [reason] = reasons_of(result, 10)
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.hint == (
        "2 more GPUs free up by 2025-03-03 12:00 UTC as stopping jobs' pods end their grace period"
    )
    assert result.status(10).estimated_start.at == NOW + timedelta(seconds=20)  # type: ignore[union-attr]


def test_every_node_in_maintenance_is_named_with_its_reason() -> None:
    # It said "2 of the 3 matching nodes are in maintenance" and named one of them.
    result = plan(
        snapshot(
            nodes=[
                node("n1"),
                node("n2", maintenance=MaintenanceState.DRAINING, maintenance_reason="PSU swap"),
                node("n3", maintenance=MaintenanceState.DRAINING, maintenance_reason="BIOS"),
            ],
            teams=[team("vision", {H100: 24})],
            running=[running(1, "vision", "n1", 8)],
            pending=[pending(10, "vision", gpus=8)],
        )
    )
    [maintenance, *_] = reasons_of(result, 10)
    assert maintenance.message == (
        "2 of the 3 matching nodes are in maintenance (n2: PSU swap; n3: BIOS); "
        "they hold 16 free GPUs"
    )


@given(
    st.datetimes(
        min_value=datetime(1000, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
        ),
    )
)
def test_a_reasons_time_is_the_utc_minute_with_its_date_whatever_the_zone_given(when):
    from queues.admission.reasons import time_text

    utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    assert time_text(when) == utc.strftime("%Y-%m-%d %H:%M UTC")


@given(
    st.sampled_from(
        [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(seconds=-30))]
    ).flatmap(
        lambda zone: st.tuples(
            st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(zone)),
            st.lists(
                st.timedeltas(-timedelta(minutes=5), timedelta(minutes=5))
                | st.timedeltas(-timedelta(days=3), timedelta(days=30)),
                max_size=30,
            ),
        )
    )
)
def test_a_plans_times_formatted_once_a_minute_read_as_each_formatted_alone(near_and_offsets):
    """``TimeTexts`` (one text per minute, for the tens of thousands of estimates of a plan)
    gives each time the text ``time_text`` gives it, in any zone, a minute not of UTC's too."""
    from queues.admission.reasons import TimeTexts, time_text

    near, offsets = near_and_offsets
    texts = TimeTexts(near)
    for when in [near + offset for offset in offsets] * 2:
        assert texts(when) == time_text(when)
