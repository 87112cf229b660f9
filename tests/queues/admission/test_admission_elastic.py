"""Elastic capacity in the engine: nodes not there yet, the Provisioning reason with its exact
text, the estimate that includes the lead time, the scale-up the plan asks for, warm floors
and scale-down (queues/admission/elastic.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.admission import NodePool, Plan, ReasonCode, ScaleUp, plan
from queues.admission.elastic import scale_down, warm_nodes
from queues.admission.testing import (
    NOW,
    STANDARD_QUEUES,
    node,
    pending,
    reservation,
    running,
    snapshot,
    team,
)

H100 = "h100-80gb"
L4 = "l4-24gb"
MINUTES = timedelta(minutes=1)


def pool(**fields) -> NodePool:
    fields.setdefault("name", "h100-pool")
    fields.setdefault("gpu_class", H100)
    fields.setdefault("max_nodes", 2)
    fields.setdefault("template", node("template", fields["gpu_class"], gpus=8))
    fields.setdefault("lead_median", 6 * MINUTES)
    fields.setdefault("lead_p90", 9 * MINUTES)
    fields.setdefault("scale_up_queues", ("training", "batch"))
    return NodePool(**fields)


def busy_cluster(**parts):
    """One 8-GPU h100 node, full for 3 more hours; a team with quota for 24."""
    parts.setdefault("nodes", [node("n1")])
    parts.setdefault("teams", [team("vision", {H100: 24})])
    parts.setdefault("running", [running(1, "vision", "n1", 8)])
    return snapshot(**parts)


def quota_bound_first(node_pool: NodePool):
    """Two 8-GPU nodes full (n2 for one more hour); job 10 of team speech, first in plan order,
    waits for its quota (held by the job on n2) for that hour; job 11 of vision needs 8 GPUs."""
    return busy_cluster(
        nodes=[node("n1"), node("n2")],
        teams=[team("vision", {H100: 24}), team("speech", {H100: 8})],
        running=[
            running(1, "vision", "n1", 8),
            running(2, "speech", "n2", 8, started=timedelta(hours=3)),
        ],
        pending=[
            pending(10, "speech", gpus=8, waited=timedelta(hours=1)),
            pending(11, "vision", gpus=8),
        ],
        node_pools=(node_pool,),
    )


def codes(result: Plan, job_id: int) -> list[str]:
    status = result.status(job_id)
    assert status is not None
    return [r.code.value for r in status.reasons]


def test_a_job_that_fits_only_on_a_node_being_provisioned_says_so_with_the_lead_time() -> None:
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8)],
            node_pools=(pool(provisioning=(NOW,)),),
        )
    )
    status = result.status(10)
    assert status is not None
    reason = status.reasons[0]
    assert reason.code is ReasonCode.PROVISIONING
    assert reason.message == (
        "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
        "ready in about 6 min (p90 9 min)"
    )
    assert reason.hint == (
        "nothing to do: it starts on the new node once it is Ready, or sooner if GPUs free up"
    )
    assert reason.details["node_pool"] == "h100-pool"
    assert reason.details["ready_in_seconds"] == 360
    assert reason.details["ready_p90_seconds"] == 540
    assert reason.details["already_requested"] is True
    # the estimate includes the lead time: at the latest the p90, likely the median
    assert status.estimated_start.at == NOW + 9 * MINUTES
    assert status.estimated_start.likely == NOW + 6 * MINUTES
    # the node already asked for serves it: nothing more to ask for
    assert result.scale_up == ()
    assert result.admissions == ()


def test_the_plan_asks_the_pool_for_a_node_a_waiting_job_needs() -> None:
    result = plan(busy_cluster(pending=[pending(10, "vision", gpus=8)], node_pools=(pool(),)))
    assert result.scale_up == (ScaleUp("h100-pool", 1, (10,), 0),)
    status = result.status(10)
    assert status is not None
    assert status.reasons[0].message == (
        "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
        "ready in about 6 min (p90 9 min)"
    )
    assert status.reasons[0].details["already_requested"] is False
    assert status.estimated_start.at == NOW + 9 * MINUTES


def test_two_jobs_that_fill_a_node_each_ask_for_two() -> None:
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8), pending(11, "vision", gpus=4, waited=MINUTES)],
            node_pools=(pool(max_nodes=3),),
        )
    )
    # 8 GPUs fill the first new node; 4 more need a second
    assert result.scale_up == (ScaleUp("h100-pool", 2, (10, 11), 0),)


def test_the_node_being_provisioned_goes_to_the_job_its_arrival_starts() -> None:
    # Job 10 waits longer, so the plan lists it first, but its team's quota is in use for
    # another hour: the node coming in 9 minutes starts job 11, and only job 11 is told so.
    # (The pool may add no node beyond the one being provisioned: see the next test.)
    result = plan(quota_bound_first(pool(provisioning=(NOW,), max_nodes=1)))
    quota_bound = result.status(10)
    assert quota_bound is not None
    assert quota_bound.estimated_start.at == NOW + timedelta(hours=1)
    assert "Provisioning" not in codes(result, 10)
    assert codes(result, 10)[0] == "QuotaExceeded"
    started = result.status(11)
    assert started is not None
    assert started.estimated_start.at == NOW + 9 * MINUTES
    assert started.reasons[0].message == (
        "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
        "ready in about 6 min (p90 9 min)"
    )
    assert result.scale_up == ()


def test_the_pool_is_asked_for_the_node_a_job_behind_a_quota_bound_one_needs() -> None:
    # Job 10 (first in plan order) waits for its quota; job 11 starts at 9 minutes on a node
    # the pool adds when asked. The node is asked for, whichever job the plan lists first.
    result = plan(quota_bound_first(pool(max_nodes=1)))
    started = result.status(11)
    assert started is not None
    assert started.estimated_start.at == NOW + 9 * MINUTES
    assert started.reasons[0].code is ReasonCode.PROVISIONING
    assert "Provisioning" not in codes(result, 10)
    assert [(ask.pool, ask.nodes) for ask in result.scale_up] == [("h100-pool", 1)]


def test_a_job_whose_pods_fill_two_coming_nodes_is_told_of_both() -> None:
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8, pods=2)],
            node_pools=(pool(provisioning=(NOW, NOW)),),
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.estimated_start.at == NOW + 9 * MINUTES
    assert status.estimated_start.likely == NOW + 6 * MINUTES
    reason = status.reasons[0]
    assert reason.message == (
        "needs 16 h100-80gb GPUs; 2 nodes are being provisioned for it, "
        "ready in about 6 min (p90 9 min)"
    )
    assert reason.hint == (
        "nothing to do: it starts once the new nodes are Ready, or sooner if GPUs free up"
    )
    assert reason.details["nodes"] == 2


def test_a_job_that_needs_more_than_the_coming_node_is_told_its_estimate_counts_on_it() -> None:
    # 16 GPUs: the one node coming holds 8, the rest frees up only when job 1 ends in 3 hours;
    # the node's arrival does not start it, but its estimate counts on the node, and says so
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8, pods=2)],
            node_pools=(pool(provisioning=(NOW,), max_nodes=1),),
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.estimated_start.at == NOW + 3 * timedelta(hours=1)
    assert codes(result, 10) == ["InsufficientCapacity", "Provisioning"]
    reason = status.reasons[1]
    assert reason.message == (
        "needs 16 h100-80gb GPUs; its estimate counts on a node being provisioned, "
        "ready in about 6 min (p90 9 min)"
    )
    assert reason.hint == (
        "nothing to do: it starts there once enough GPUs free up after the new node is Ready, "
        "at the latest 2025-03-03 15:00 UTC"
    )
    assert reason.details["starts_on_arrival"] is False
    # likely is not moved to the node's median: its arrival is not what starts the job
    assert status.estimated_start.likely != NOW + 6 * MINUTES
    assert result.scale_up == ()


def test_the_pool_is_asked_for_a_node_the_forecast_counts_on_after_its_arrival() -> None:
    # 16 GPUs: the node the pool may add and n1 once job 1 ends in 3 hours. The start is not
    # the node's arrival, but the estimate counts on the node: the pool is asked for it.
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8, pods=2)],
            node_pools=(pool(max_nodes=1),),
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.estimated_start.at == NOW + 3 * timedelta(hours=1)
    assert codes(result, 10) == ["InsufficientCapacity", "Provisioning"]
    assert status.reasons[1].details["already_requested"] is False
    assert result.scale_up == (ScaleUp("h100-pool", 1, (10,), 0),)


def test_a_node_due_within_a_minute_is_said_plainly() -> None:
    # asked for 8 minutes 30 seconds ago: expected in under a minute (its median is 6 min,
    # overdue), at the latest in 30 seconds (its p90, 9 min)
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", gpus=8)],
            node_pools=(pool(provisioning=(NOW - timedelta(minutes=8, seconds=30),)),),
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.reasons[0].message == (
        "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
        "ready in under a minute (p90 1 min)"
    )


@given(name=st.sampled_from(["a-pool", "h100-pool", "zz-pool"]))
@settings(max_examples=10, deadline=None)
def test_a_node_there_is_taken_before_one_not_yet_whatever_the_pool_is_called(name: str) -> None:
    # n2 frees in 1 hour, as job 10 (held back after a roll-back) may start: it starts on n2,
    # not on a node the pool would add, and only job 11's node is asked for
    result = plan(
        busy_cluster(
            nodes=[node("n1"), node("n2")],
            teams=[team("vision", {H100: 32})],
            running=[
                running(1, "vision", "n1", 8),
                running(2, "vision", "n2", 8, started=timedelta(hours=3)),
            ],
            pending=[
                pending(10, "vision", gpus=8, not_before=NOW + timedelta(hours=1), rollbacks=1),
                pending(11, "vision", gpus=8),
            ],
            node_pools=(pool(name=name, max_nodes=2),),
        )
    )
    assert result.scale_up == (ScaleUp(name, 1, (11,), 0),)
    assert "Provisioning" not in codes(result, 10)
    assert codes(result, 11)[0] == "Provisioning"


def test_a_plan_without_the_forecast_still_says_a_node_is_coming() -> None:
    # between refreshes the reconcile plans without the forecast; a new job is told all the same
    snapshot = busy_cluster(
        pending=[pending(10, "vision", gpus=8)], node_pools=(pool(provisioning=(NOW,)),)
    )
    for result in (plan(snapshot, estimates=False), plan(snapshot, estimates=False, explain={10})):
        assert codes(result, 10) == ["Provisioning", "InsufficientCapacity"]
        assert result.scale_up is None


def test_jobs_projected_beyond_the_horizon_are_packed_onto_the_nodes_left() -> None:
    # 14 jobs of 8 GPUs, four nodes freeing within minutes, a pool that may add 10: with a
    # horizon of 2 the simulation places the first jobs, the projection the rest; the pool is
    # asked for the same 10 nodes either way
    minute = timedelta(minutes=1)
    snapshot = busy_cluster(
        nodes=[node(f"n{i}") for i in range(1, 5)],
        teams=[team("vision", {H100: 1000})],
        running=[
            running(i, "vision", f"n{i}", 8, started=timedelta(hours=4) - i * minute)
            for i in range(1, 5)
        ],
        pending=[pending(100 + k, "vision", gpus=8) for k in range(14)],
        node_pools=(pool(max_nodes=10),),
    )
    simulated = plan(snapshot, horizon=None)
    projected = plan(snapshot, horizon=2)
    asked = ScaleUp("h100-pool", 10, tuple(range(104, 114)), 0)
    assert simulated.scale_up == (asked,)
    assert projected.scale_up == (asked,)
    status = projected.status(113)
    assert status is not None and status.estimated_start.projected
    assert codes(projected, 113)[0] == "Provisioning"


def test_a_pool_at_its_maximum_keeps_todays_reasons() -> None:
    fixed = plan(busy_cluster(pending=[pending(10, "vision", gpus=8)]))
    full = plan(
        busy_cluster(
            nodes=[node("n1"), node("p1")],
            running=[running(1, "vision", "n1", 8), running(2, "vision", "p1", 8)],
            pending=[pending(10, "vision", gpus=8)],
            node_pools=(pool(max_nodes=1, members=("p1",)),),
        )
    )
    assert codes(fixed, 10) == ["InsufficientCapacity"]
    assert codes(full, 10) == ["InsufficientCapacity"]
    assert full.scale_up == ()


def test_a_queue_that_may_not_scale_up_keeps_todays_reasons() -> None:
    result = plan(
        busy_cluster(
            pending=[pending(10, "vision", "interactive", gpus=8)],
            node_pools=(pool(scale_up_queues=("batch",)),),
        )
    )
    assert codes(result, 10) == ["InsufficientCapacity"]
    assert result.scale_up == ()


def test_a_job_that_starts_before_a_node_could_come_asks_for_none() -> None:
    result = plan(
        busy_cluster(
            running=[running(1, "vision", "n1", 8, started=timedelta(hours=4) - 2 * MINUTES)],
            pending=[pending(10, "vision", gpus=8)],
            node_pools=(pool(),),
        )
    )
    status = result.status(10)
    assert status is not None
    assert status.estimated_start.at == NOW + 2 * MINUTES
    assert codes(result, 10) == ["InsufficientCapacity"]
    assert result.scale_up == ()


def test_without_node_pools_the_plan_is_unchanged() -> None:
    base = busy_cluster(pending=[pending(10, "vision", gpus=8)])
    assert plan(base).scale_up is None
    assert codes(plan(base), 10) == ["InsufficientCapacity"]


def test_a_warm_floor_holds_an_empty_node_for_its_queue_and_asks_to_keep_it() -> None:
    l4_pool = pool(
        name="l4-pool",
        gpu_class=L4,
        template=node("t", L4, gpus=4),
        max_nodes=4,
        members=("l4-a", "l4-b"),
        scale_up_queues=("batch",),
        warm_floors=(("interactive", 1),),
    )
    start = snapshot(
        nodes=[node("l4-a", L4, gpus=4), node("l4-b", L4, gpus=4)],
        teams=[team("vision", {L4: (8, 8)})],
        pending=[pending(10, "vision", "batch", gpus=4), pending(11, "vision", "batch", gpus=4)],
        node_pools=(l4_pool,),
    )
    assert warm_nodes(start) == {"l4-a": "interactive"}
    result = plan(start)
    # batch takes the node that is not held; the second batch job waits for a new node
    assert [a.job_id for a in result.admissions] == [10]
    assert result.admissions[0].nodes == ("l4-b",)
    assert codes(result, 11)[0] == "Provisioning"
    assert result.scale_up == (ScaleUp("l4-pool", 1, (11,), 0),)
    # an interactive job starts at once on the warm node
    with_interactive = replace(
        start, pending=(*start.pending, pending(12, "vision", "interactive", gpus=4))
    )
    second = plan(with_interactive)
    admitted = {a.job_id: a.nodes for a in second.admissions}
    assert admitted[12] == ("l4-a",)
    # interactive now runs on its floor's node: nothing more is held, so nothing asked for it
    after = replace(
        start,
        running=(running(12, "vision", "l4-a", 4, queue="interactive", gpu_class=L4),),
        pending=(),
    )
    assert warm_nodes(after) == {}
    assert plan(after).scale_up == ()


def test_a_warm_floor_without_an_empty_node_asks_for_one() -> None:
    l4_pool = pool(
        name="l4-pool",
        gpu_class=L4,
        template=node("t", L4, gpus=4),
        max_nodes=3,
        members=("l4-a",),
        scale_up_queues=(),
        warm_floors=(("interactive", 2),),
    )
    start = snapshot(
        nodes=[node("l4-a", L4, gpus=4)],
        teams=[team("vision", {L4: 8})],
        node_pools=(l4_pool,),
    )
    assert plan(start).scale_up == (ScaleUp("l4-pool", 1, (), 1),)


def scale_pool(**fields) -> NodePool:
    fields.setdefault("members", ("p1", "p2", "p3"))
    fields.setdefault("max_nodes", 3)
    fields.setdefault("scale_down_delay", 10 * MINUTES)
    return pool(**fields)


def test_scale_down_removes_only_nodes_empty_for_the_delay() -> None:
    start = snapshot(
        nodes=[node("p1"), node("p2"), node("p3")],
        teams=[team("vision", {H100: 24})],
        running=[running(1, "vision", "p1", 8)],
        node_pools=(scale_pool(),),
    )
    empty = {"p2": NOW - 11 * MINUTES, "p3": NOW - 5 * MINUTES}
    assert scale_down(start, empty) == ["p2"]


def test_scale_down_keeps_min_nodes_warm_nodes_and_reserved_capacity() -> None:
    start = snapshot(
        nodes=[node("p1"), node("p2"), node("p3")],
        teams=[team("vision", {H100: 8}), team("serving")],
        node_pools=(scale_pool(min_nodes=1, warm_floors=(("interactive", 1),)),),
    )
    long_ago = dict.fromkeys(("p1", "p2", "p3"), NOW - timedelta(hours=1))
    held = set(warm_nodes(start))
    assert held == {"p1"}
    # min 1 and the warm node p1: p3 and p2 may go
    assert scale_down(start, long_ago, held=held) == ["p3", "p2"]
    # a reservation of 12 GPUs in force keeps two nodes
    reserved = replace(start, reservations=(reservation(5, "serving", 12),))
    assert scale_down(reserved, long_ago, held=held) == ["p3"]
    # one starting within the lead time counts too
    soon = replace(
        start,
        reservations=(
            reservation(5, "serving", 12, start=NOW + 5 * MINUTES, end=NOW + timedelta(hours=2)),
        ),
    )
    assert scale_down(soon, long_ago, held=held) == ["p3"]


@settings(max_examples=40, deadline=None)
@given(
    busy=st.lists(st.booleans(), min_size=3, max_size=3),
    idle_minutes=st.lists(st.integers(0, 30), min_size=3, max_size=3),
    floor=st.integers(0, 3),
    minimum=st.integers(0, 3),
)
def test_scale_down_never_removes_a_busy_node_nor_goes_below_the_floors(
    busy, idle_minutes, floor, minimum
) -> None:
    names = ("p1", "p2", "p3")
    start = snapshot(
        nodes=[node(n) for n in names],
        teams=[team("vision", {H100: 24})],
        queues=STANDARD_QUEUES,
        running=[
            running(i + 1, "vision", n, 8, queue="interactive")
            for i, (n, b) in enumerate(zip(names, busy, strict=True))
            if b
        ],
        node_pools=(
            scale_pool(min_nodes=minimum, warm_floors=(("interactive", floor),) if floor else ()),
        ),
    )
    empty = {n: NOW - m * MINUTES for n, m, b in zip(names, idle_minutes, busy, strict=True)}
    held = set(warm_nodes(start))
    removed = scale_down(start, empty, held=held)
    busy_names = {n for n, b in zip(names, busy, strict=True) if b}
    assert not set(removed) & busy_names
    assert not set(removed) & held
    assert len(names) - len(removed) >= minimum
    kept_for_interactive = len(busy_names) + len(held)
    assert kept_for_interactive >= min(floor, len(names))
    for name in removed:
        assert NOW - empty[name] >= 10 * MINUTES


def test_a_node_held_warm_is_a_wait_said_plainly_never_a_never_fits() -> None:
    l4_pool = pool(
        name="l4-pool",
        gpu_class=L4,
        template=node("t", L4, gpus=4),
        max_nodes=1,
        members=("a",),
        scale_up_queues=(),
        warm_floors=(("interactive", 1),),
    )
    start = snapshot(
        nodes=[node("a", L4, gpus=4)],
        teams=[team("vision", {L4: (8, 8)})],
        pending=[pending(10, "vision", "batch", gpus=4)],
        node_pools=(l4_pool,),
    )
    status = plan(start).status(10)
    assert status is not None
    [reason] = status.reasons
    assert reason.code is ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message == (
        "4 free l4-24gb GPUs are only on nodes held empty for other queues' warm floors "
        "(a: kept warm for queue interactive); needs 4"
    )
    assert reason.hint == (
        "the warm floor of queue interactive holds them until that queue runs there; "
        "the node pool adds nodes only for queues that may scale it up"
    )
