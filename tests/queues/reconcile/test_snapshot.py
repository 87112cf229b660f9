"""The admission engine sees exactly what the database holds."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queues import admission as engine
from queues.models import CapabilityClass, GpuClass, Job, Node, Queue, Team, UsageInterval
from queues.reconcile.snapshot import snapshot_build
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(example_policy):
    """A small mirrored cluster: two A100 nodes (one MIG), one H100 node, one time-sliced T4."""
    classes = {g.name: g for g in GpuClass.objects.all()}
    Node.objects.create(
        name="a100-1", gpu_class=classes["a100-80gb"], gpu_count=8, rack="r1", network_domain="ib-b"
    )
    Node.objects.create(
        name="a100-mig",
        gpu_class=classes["a100-80gb"],
        gpu_count=8,
        rack="r1",
        network_domain="ib-b",
        mig_layout={"1g.10gb": 28, "3g.40gb": 8},
        outside_devices={"1g.10gb": 2},
    )
    Node.objects.create(
        name="h100-1",
        gpu_class=classes["h100-80gb"],
        gpu_count=8,
        rack="r2",
        network_domain="ib-a",
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    Node.objects.create(
        name="h100-perf",
        gpu_class=classes["h100-80gb"],
        gpu_count=8,
        rack="r2",
        network_domain="ib-a",
        taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "perf", "effect": "NoSchedule"},
        ],
    )
    Node.objects.create(
        name="t4-1",
        gpu_class=classes["t4"],
        gpu_count=4,
        time_slice_replicas=4,
        outside_devices={"gpu": 3},
        maintenance="cordoned",
        maintenance_reason="kernel upgrade",
    )


def submit(user, team, queue, capability, **fields):
    return JobFactory(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        **fields,
    )


def test_nodes_carry_capacity_and_what_others_hold(cluster):
    snapshot = snapshot_build(now=timezone.now())

    nodes = {n.name: n for n in snapshot.nodes}
    assert nodes["a100-mig"].mig == (
        engine.MigSlots(profile="1g.10gb", total=28, outside=2),
        engine.MigSlots(profile="3g.40gb", total=8, outside=0),
    )
    assert nodes["t4-1"].outside_gpu_eq == Fraction(3, 4)
    assert nodes["t4-1"].maintenance is engine.MaintenanceState.CORDONED
    assert nodes["h100-1"].taints == ()
    assert nodes["h100-perf"].taints == ("dedicated=perf:NoSchedule",)
    assert (nodes["a100-1"].rack, nodes["a100-1"].network_domain) == ("r1", "ib-b")


def test_policy_reaches_the_engine_with_rate_card_weights(cluster):
    snapshot = snapshot_build(now=timezone.now())

    weights = {g.name: g.weight for g in snapshot.gpu_classes}
    assert weights == {"a100-80gb": Fraction(5, 2), "h100-80gb": 4, "l4": 1, "t4": Fraction(1, 2)}
    training = next(q for q in snapshot.queues if q.name == "training")
    assert training.preemption is engine.PreemptionClass.GRACEFUL
    assert training.grace_period == timedelta(minutes=10)
    assert training.required_topology is engine.TopologyScope.NETWORK_DOMAIN
    assert training.teams == ("nlp", "research", "vision")
    nlp = next(t for t in snapshot.teams if t.name == "nlp")
    assert engine.Quota("h100-80gb", Fraction(8), Fraction(16)) in nlp.quotas
    assert nlp.weight == 3
    assert {r.id for r in snapshot.reservations} == set(
        Team.objects.filter(name__in=["search", "speech", "nlp"]).values_list(
            "reservations", flat=True
        )
    )


def test_a_pending_job_is_planned_on_the_cheapest_class_that_fits(cluster, mia):
    # vision's A100 quota is 4 nominal: the whole job fits in it on the cheaper class.
    job = submit(mia, "vision", "training", "bf16-large", pods=1, gpus_per_pod=4)

    plan = engine.plan(snapshot_build(now=timezone.now()))

    admission = plan.admission(job.pk)
    assert admission is not None
    assert (admission.gpu_class, admission.nodes) == ("a100-80gb", ("a100-1",))
    assert admission.capacity is engine.CapacityKind.NOMINAL


def test_a_job_beyond_nominal_quota_borrows_as_a_whole(cluster, mia):
    job = submit(mia, "vision", "training", "bf16-large", pods=1, gpus_per_pod=8)

    admission = engine.plan(snapshot_build(now=timezone.now())).admission(job.pk)

    assert (admission.gpu_class, admission.capacity) == ("a100-80gb", engine.CapacityKind.BORROWED)


def test_running_jobs_hold_what_they_hold(cluster, mia):
    a100 = GpuClass.objects.get(name="a100-80gb")
    holder = submit(mia, "vision", "training", "bf16-large", pods=1, gpus_per_pod=4)
    Job.objects.filter(pk=holder.pk).update(
        state="running",
        gpu_class=a100,
        nodes=["a100-1"],
        capacity_kind="nominal",
        started_at=timezone.now(),
    )
    waiting = submit(mia, "vision", "training", "bf16-large", pods=1, gpus_per_pod=8)

    plan = engine.plan(snapshot_build(now=timezone.now()))

    # 4 of the A100 node's 8 GPUs are held: 8 more only fit on the H100 node, within quota.
    admission = plan.admission(waiting.pk)
    assert admission is not None, plan.status(waiting.pk)
    assert (admission.gpu_class, admission.nodes) == ("h100-80gb", ("h100-1",))
    assert admission.capacity is engine.CapacityKind.NOMINAL


def used(job, uid, *, start, end, devices=1):
    """A usage interval of ``job``'s pod ``uid`` on an H100 node (the team's own, vision's)."""
    return UsageInterval.objects.create(
        job=job,
        pod_uid=uid,
        pod_name=uid,
        team=job.team,
        cost_center="CC-1001",
        gpu_class=GpuClass.objects.get(name="h100-80gb"),
        node="h100-1",
        devices=devices,
        started_at=start,
        ended_at=end,
    )


def test_recent_usage_is_normalized_and_decays_by_half_life(cluster, mia):
    now = timezone.now()
    job = submit(mia, "vision", "training", "bf16-large")
    used(job, "p1", devices=8, start=now - timedelta(hours=10), end=now)
    used(job, "p2", start=now - timedelta(days=7, hours=1), end=now - timedelta(days=7))

    snapshot = snapshot_build(now=now)

    usage = next(t.recent_usage for t in snapshot.teams if t.name == "vision")
    # 10 h × 8 GPUs × weight 4 = 320, plus 1 h × 1 × 4 a half-life ago = 2.
    assert usage == Fraction(322)
    assert next(t.recent_usage for t in snapshot.teams if t.name == "nlp") == 0


def test_reads_do_not_grow_with_jobs(cluster, mia, django_assert_max_num_queries):
    for _ in range(30):
        submit(mia, "vision", "batch", "any-gpu")

    # a fixed number: the policy, the running and waiting jobs, and the names of the waiting
    # jobs' queues, teams, owners and capability classes (one query each, not one per job); on
    # PostgreSQL one more, the waiting jobs' row versions, before their rows
    # (one of them: when each stopping job was stopped, for its grace period's end)
    with django_assert_max_num_queries(26 if connection.vendor == "postgresql" else 25):
        snapshot = snapshot_build(now=timezone.now())

    assert len(snapshot.pending) == 30


def finished(user, image, ratio, *, queue="training", state="succeeded", days_ago=1):
    """A finished job of ``user`` that ran ``ratio`` of its one-hour limit."""
    end = timezone.now() - timedelta(days=days_ago)
    return submit(
        user,
        "vision",
        queue,
        "any-gpu",
        image=image,
        runtime_limit=timedelta(hours=1),
        state=state,
        started_at=end - timedelta(hours=ratio),
        finished_at=end,
    )


def test_runtime_history_predicts_each_jobs_runtime_shrunk_toward_its_queues(cluster, mia):
    from django.contrib.auth import get_user_model

    victor = get_user_model().objects.get(username="victor")
    finished(mia, "train:1", 0.5)
    finished(mia, "train:1", 0.5, state="failed")
    finished(victor, "eval:2", 0.2)
    finished(victor, "eval:2", 0.9)
    finished(victor, "eval:2", 0.8)
    finished(victor, "eval:2", 0.1, state="cancelled")  # cancelled: says nothing of runtimes
    finished(victor, "eval:2", 0.1, days_ago=40)  # too old
    finished(victor, "eval:2", 0.3, queue="batch")  # four in batch: too few of its own
    finished(victor, "eval:2", 0.3, queue="batch")
    finished(victor, "eval:2", 0.3, queue="batch")
    finished(victor, "eval:2", 0.3, queue="batch")
    mine = submit(mia, "vision", "training", "any-gpu", image="train:1")
    new = submit(victor, "vision", "training", "any-gpu", image="new:1")
    other = submit(mia, "vision", "batch", "any-gpu", image="train:1")

    snapshot = snapshot_build(now=timezone.now())

    forecasts = {job.id: job.forecast for job in snapshot.pending}
    # the queue: ratios 0.5, 0.5, 0.2, 0.9, 0.8: mean 0.58, 10th percentile 0.2, 90th 0.9;
    # mia's train:1 (mean 0.5 of 2 jobs) is shrunk toward it: (2 × 0.5 + 3 × 0.58) / 5 = 0.548
    assert numbers(forecasts[mine.pk]) == pytest.approx((0.548, 0.168, 0.868))
    assert numbers(forecasts[new.pk]) == pytest.approx((0.58, 0.2, 0.9))
    # batch has 4 finished jobs: the cluster's 9 are its prior — 0.2, 0.3 × 4, 0.5 × 2, 0.8,
    # 0.9: mean 4.1 / 9 = 0.4556, 10th percentile 0.2, 90th 0.9; mia's train:1 has no batch runs
    assert numbers(forecasts[other.pk]) == pytest.approx((0.45556, 0.2, 0.9), abs=1e-4)
    queues = {q.name: q.forecast for q in snapshot.queues}
    assert numbers(queues["training"]) == pytest.approx((0.58, 0.2, 0.9))
    assert numbers(queues["batch"]) == pytest.approx((0.45556, 0.2, 0.9), abs=1e-4)
    # a queue nobody ran in yet: the cluster's prior too
    assert numbers(queues["interactive"]) == pytest.approx((0.45556, 0.2, 0.9), abs=1e-4)


def test_on_a_cold_start_the_first_estimate_already_has_an_interval(cluster, mia):
    """No finished job anywhere: the documented default prior (likely 0.7, 10th percentile
    0.3, 90th 1.0 of the limit) predicts, so "likely" is not "at the latest"."""
    waiting = submit(mia, "vision", "training", "any-gpu", image="train:1")

    snapshot = snapshot_build(now=timezone.now())

    assert numbers({j.id: j.forecast for j in snapshot.pending}[waiting.pk]) == pytest.approx(
        (0.7, 0.3, 1.0)
    )
    assert {q.name: numbers(q.forecast) for q in snapshot.queues}["training"] == pytest.approx(
        (0.7, 0.3, 1.0)
    )


def numbers(forecast: engine.Forecast | None) -> tuple[float, float, float] | None:
    return None if forecast is None else (forecast.likely, forecast.low, forecast.high)


def test_a_waiting_job_written_since_the_last_snapshot_is_read_anew_and_only_it(cluster, mia):
    """On PostgreSQL a snapshot reads whole only the waiting jobs written since the last one
    (by their row versions): even a second write in the same transaction is seen."""
    jobs = [submit(mia, "vision", "batch", "any-gpu") for _ in range(3)]
    first = {j.id: j for j in snapshot_build(now=timezone.now(), forecasts=False).pending}
    Job.objects.filter(pk=jobs[1].pk).update(priority=7)
    Job.objects.filter(pk=jobs[1].pk).update(priority=8)  # twice, in the test's transaction

    with CaptureQueriesContext(connection) as captured:
        second = {j.id: j for j in snapshot_build(now=timezone.now(), forecasts=False).pending}

    assert [second[j.pk].priority for j in jobs] == [0, 8, 0]
    assert second[jobs[0].pk] is first[jobs[0].pk]  # unchanged: the same job as before
    if connection.vendor == "postgresql":
        whole = [
            q["sql"] for q in captured if '"priority"' in q["sql"] and "row_version" in q["sql"]
        ]
        assert len(whole) == 1 and f"IN ({jobs[1].pk})" in whole[0]


def test_fair_share_reads_whole_only_usage_written_since_the_last_snapshot(
    cluster, mia, monkeypatch
):
    """Closed usage intervals never change: in the worker, on PostgreSQL, a snapshot reads whole
    only the ones written since the last (an interval that closed in between is read again,
    with its end)."""
    from queues.reconcile import snapshot

    monkeypatch.setattr(snapshot._USAGE_ROWS, "keep", True)  # as the worker sets it
    now = timezone.now()
    job = submit(mia, "vision", "training", "bf16-large")

    def interval(uid, hours, ended):
        return used(job, uid, start=now - timedelta(hours=hours), end=ended)

    interval("closed", 2, now - timedelta(hours=1))  # 1 h × weight 4, ended just now: ~4
    still_open = interval("open", 3, None)  # 3 h so far × weight 4 = 12
    first = next(t.recent_usage for t in snapshot_build(now=now).teams if t.name == "vision")
    UsageInterval.objects.filter(pk=still_open.pk).update(ended_at=now - timedelta(hours=2))

    with CaptureQueriesContext(connection) as captured:
        second = next(t.recent_usage for t in snapshot_build(now=now).teams if t.name == "vision")

    decay = 0.5 ** (1 / (7 * 24))  # an hour ago, at the default half-life of 7 days
    assert float(first) == pytest.approx(4 * decay + 12, abs=1e-3)
    assert float(second) == pytest.approx(4 * decay + 4 * decay**2, abs=1e-3)
    if connection.vendor == "postgresql":
        whole = [
            q["sql"]
            for q in captured
            if '"share_numerator"' in q["sql"] and "row_version" in q["sql"]
        ]
        assert len(whole) == 1 and f"IN ({still_open.pk})" in whole[0]


def test_a_stopping_jobs_grace_period_runs_from_when_it_was_stopped(cluster, mia):
    # It ran from "now" at every cycle, so its end (and every estimate behind it) moved later
    # with each one and never came.
    from queues.models import EventKind, JobEvent, JobState

    stopped = timezone.now() - timedelta(seconds=10)
    job = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        gpus_per_pod=2,
        state=JobState.CANCELLED,
        terminating=True,
        gpu_class=GpuClass.objects.get(name="a100-80gb"),
        nodes=["a100-1"],
        started_at=stopped - timedelta(hours=1),
    )
    JobEvent.objects.create(job=job, at=stopped, kind=EventKind.CANCELLED, message="cancelled")
    grace = Queue.objects.get(name="batch").termination_grace

    ends = []
    for later in (0, 5, 25):
        snapshot = snapshot_build(now=stopped + timedelta(seconds=10 + later))
        (held,) = [r for r in snapshot.running if r.id == job.pk]
        assert held.terminating
        ends.append(held.started_at + held.runtime_limit)

    assert ends == [stopped + grace] * 3
    assert job.stopping_until() == stopped + grace
