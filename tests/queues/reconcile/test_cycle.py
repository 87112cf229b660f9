"""The reconcile against the simulated cluster, over real HTTP with the official client."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, Job, JobState, Node, Queue, Team, UsageInterval
from queues.reconcile.cycle import reconcile_cycle
from simcluster.kubelet import DURATION_ANNOTATION
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


@pytest.fixture
def cycle(sim_cluster, cluster):
    def run():
        return reconcile_cycle(cluster=cluster, now=sim_cluster.now())

    return run


def submit(user, *, team="vision", queue="batch", capability="any-gpu", seconds=600, **fields):
    env = fields.pop("env", {})
    return JobFactory(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        env={"SIM_DURATION_SECONDS": str(seconds), **env},
        **fields,
    )


def test_nodes_are_mirrored_as_the_cluster_labels_them(cycle):
    cycle()

    h100 = Node.objects.filter(gpu_class__name="h100-80gb")
    assert h100.count() == 5
    cordoned = h100.get(maintenance="cordoned")
    assert cordoned.maintenance_reason == "NVLink replacement"
    assert cordoned.maintenance_until is not None
    unhealthy = Node.objects.get(healthy=False)
    assert unhealthy.gpu_class.name == "l4"
    assert "double-bit ECC errors on GPU 2" in unhealthy.health_reason
    t4 = Node.objects.filter(gpu_class__name="t4").first()
    assert (t4.gpu_count, t4.time_slice_replicas) == (4, 4)
    mig = Node.objects.exclude(mig_layout={}).get()
    assert mig.mig_layout == {"1g.10gb": 28, "3g.40gb": 8}
    assert {n.network_domain for n in h100} == {"ib-a"}
    # Allocatable, not capacity: what a pod may ask of the node.
    assert {(n.cpu_millicores, n.memory_mib) for n in h100} == {(190_000, 1900 * 1024)}


def test_a_job_lives_from_pending_to_succeeded_with_the_clusters_times(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb", gpus_per_pod=2, seconds=600)

    first = cycle()

    job.refresh_from_db()
    assert first.admitted == [job.pk]
    assert job.state == JobState.ADMITTED
    assert job.k8s_job_name == f"gpuportal-job-{job.pk}"
    assert job.gpu_class.name == "a100-80gb"  # the cheapest class with 40 GB or more
    sim_cluster.advance(30)

    cycle()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    interval = UsageInterval.objects.get(job=job)
    assert interval.started_at == job.started_at
    assert (interval.devices, interval.share, interval.ended_at) == (2, 1, None)
    sim_cluster.advance(600)

    cycle()

    job.refresh_from_db()
    interval.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.exit_code == 0
    assert interval.ended_at - interval.started_at == timedelta(seconds=600)
    assert not interval.end_estimated
    assert [e.kind for e in job.events.all()] == ["admitted", "started", "succeeded"]


def test_a_job_that_started_and_ended_between_two_cycles_ends_in_one(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb", seconds=60)
    cycle()
    sim_cluster.advance(90)  # the image pulled, the pod ran its 60 s and completed

    second = cycle()

    job.refresh_from_db()
    # Started and succeeded in the same cycle: its GPUs are free for the next job at once.
    assert second.transitions == {"admitted→running": 1, "running→succeeded": 1}
    assert job.state == JobState.SUCCEEDED
    assert [e.kind for e in job.events.all()] == ["admitted", "started", "succeeded"]
    interval = UsageInterval.objects.get(job=job)
    assert interval.ended_at - interval.started_at == timedelta(seconds=60)
    assert (interval.started_at, interval.ended_at) == (job.started_at, job.finished_at)


def test_a_jobs_pods_are_told_where_the_portal_is_with_a_token_for_this_job_alone(
    sim_cluster, cycle, mia, settings
):
    settings.PORTAL_URL = "https://gpus.example.org"
    job = submit(mia, seconds=600)

    cycle()

    created = sim_cluster.batch().read_namespaced_job(f"gpuportal-job-{job.pk}", "team-vision")
    env = {e.name: e.value for e in created.spec.template.spec.containers[0].env}
    assert env["GPUPORTAL_API_URL"] == "https://gpus.example.org"
    assert env["GPUPORTAL_JOB_ID"] == str(job.pk)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {env['GPUPORTAL_JOB_TOKEN']}")
    sim_cluster.advance(30)
    cycle()  # running: a checkpoint may be reported
    assert client.post(f"/api/jobs/{job.pk}/checkpoint/").status_code == 200
    assert client.get(f"/api/jobs/{job.pk}/").status_code == 401  # that token opens nothing else


def test_a_job_that_runs_past_its_limit_fails_timed_out(sim_cluster, cycle, mia):
    job = submit(mia, seconds=100_000, runtime_limit=timedelta(minutes=10))
    cycle()
    sim_cluster.advance(30)
    cycle()
    sim_cluster.advance(11 * 60)

    cycle()

    job.refresh_from_db()
    assert (job.state, job.failure_reason) == (JobState.FAILED, "TimedOut")
    assert job.terminating  # its pods are still going
    sim_cluster.advance(120)
    cycle()
    cycle()
    job.refresh_from_db()
    assert not job.terminating
    assert UsageInterval.objects.get(job=job).ended_at is not None


def test_a_job_that_runs_exactly_its_limit_succeeds(sim_cluster, cycle, mia):
    # Start times come to the second: a pod that started at :00.7 reads :00, so the portal's
    # clock passes "start + limit" before the pod's completion is seen. That is no time-out.
    sim_cluster.advance(0.7)
    job = submit(mia, seconds=600, runtime_limit=timedelta(minutes=10))
    cycle()
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    started = job.started_at

    sim_cluster.advance((started + timedelta(minutes=10) - sim_cluster.now()).total_seconds() + 0.2)
    cycle()  # past start + limit by the clock, the pod not finished yet

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    sim_cluster.advance(2)
    cycle()
    job.refresh_from_db()
    assert (job.state, job.failure_reason) == (JobState.SUCCEEDED, "")


def test_a_waiting_job_gets_its_reasons_and_position(cycle, mia):
    # vision may use 4 nominal + 4 borrowed A100s in training; 16 is over any quota it has.
    job = submit(mia, queue="interactive", capability="any-gpu", gpus_per_pod=1, pods=1)
    too_big = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)

    cycle()

    too_big.refresh_from_db()
    assert too_big.state == JobState.PENDING
    assert [r["code"] for r in too_big.pending_reasons] == ["NeverFits"]
    assert too_big.pending_reasons[0]["message"].startswith("can never start: ")
    assert too_big.estimated_start is None
    assert too_big.position == 1
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED


def test_with_a_long_queue_shown_reasons_are_refreshed_every_few_seconds_new_ones_at_once(
    cycle, mia, monkeypatch
):
    import queues.reconcile.plan as plan
    from queues.admission.forecast import NOT_ESTIMATED
    from queues.models import Lease, QueueEstimate

    monkeypatch.setattr(plan, "REASONS_ALL_UP_TO", 1)  # "long": more than one job waiting
    monkeypatch.setattr(plan, "FORECAST_FIRST_UP_TO", 1)
    first = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)
    second = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)
    # admitted now: mia is at the queue's 16-GPU limit per user, so the third job waits for it
    now = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=2)
    report = cycle()  # the first refresh of all
    # with a long queue the admissions go to the cluster first, the forecast for reasons after
    assert [s for s in report.steps if s.startswith(("plan", "apply", "cluster"))] == [
        "plan (no forecast)",
        "apply",
        "cluster",
        "plan",
        "cluster (answers)",  # the creates answered while the forecast ran
    ]
    assert report.admitted == [now.pk] and report.jobs_created == 1
    estimates_at = QueueEstimate.objects.values_list("computed_at", flat=True).first()
    estimates = QueueEstimate.objects.count()
    assert estimates > 0
    Job.objects.filter(pk=first.pk).update(position=7)  # as if shown a while ago
    third = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=2)
    # the next refresh not due yet (however slow this machine is today)
    assert Lease.objects.filter(name=plan.REASONS_LEASE).update(
        expires_at=timezone.now() + timedelta(minutes=1)
    )

    cycle()

    positions = dict(Job.objects.values_list("pk", "position"))
    assert [positions[j.pk] for j in (first, second, third)] == [7, 2, 3]
    # between refreshes the engine skips its forecast: the new job says its estimate is coming,
    # the queue's published estimates stay as the last refresh computed them
    third.refresh_from_db()
    assert third.pending_reasons and third.estimated_start is None
    assert third.estimated_start_note == NOT_ESTIMATED
    assert QueueEstimate.objects.filter(computed_at=estimates_at).count() == estimates
    Lease.objects.filter(name=plan.REASONS_LEASE).update(expires_at=timezone.now())

    cycle()

    positions = dict(Job.objects.values_list("pk", "position"))
    assert [positions[j.pk] for j in (first, second, third)] == [1, 2, 3]
    third.refresh_from_db()
    assert third.estimated_start is not None and third.estimated_start_note == ""


def test_up_to_ten_thousand_waiting_every_estimate_is_refreshed_every_2_s_admissions_first(
    cycle, mia, monkeypatch
):
    """Issue #30: past ``FORECAST_FIRST_UP_TO`` and up to ``REASONS_ALL_UP_TO`` waiting, a cycle
    2 s or more after the last refresh gives every waiting job its estimate (not paced by the
    refresh's cost), and its admissions go to the cluster before the forecast runs."""
    import queues.reconcile.plan as plan
    from queues.admission.forecast import NOT_ESTIMATED
    from queues.models import Lease

    monkeypatch.setattr(plan, "FORECAST_FIRST_UP_TO", 1)  # "past it": more than one waiting
    # mia may hold 16 GPUs in the queue: the first job starts, the others wait for it to end
    first = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=2)
    second = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=2)

    report = cycle()

    assert [s for s in report.steps if s.startswith(("plan", "apply", "cluster"))] == [
        "plan (no forecast)",
        "apply",
        "cluster",
        "plan",
        "cluster (answers)",
    ]
    assert report.admitted == [first.pk]
    second.refresh_from_db()
    assert second.estimated_start is not None and second.position == 1
    Job.objects.filter(pk=second.pk).update(position=7, estimated_start=None)  # as if stale
    third = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=2)
    # the last refresh less than 2 s ago (however slow this machine is today)
    every = Lease.objects.filter(name=plan.REASONS_EVERY_LEASE)
    assert every.update(expires_at=timezone.now() + timedelta(minutes=1)) == 1

    between = cycle()

    assert "plan" not in between.steps
    second.refresh_from_db()
    third.refresh_from_db()
    assert (second.position, second.estimated_start) == (7, None)
    assert third.pending_reasons and third.estimated_start_note == NOT_ESTIMATED
    every.update(expires_at=timezone.now())

    due = cycle()

    assert [s for s in due.steps if s.startswith("plan")] == ["plan (no forecast)", "plan"]
    assert not Lease.objects.filter(name=plan.REASONS_LEASE).exists()  # not paced by its cost
    for job, position in ((second, 1), (third, 2)):
        job.refresh_from_db()
        assert job.position == position
        assert job.estimated_start is not None and job.estimated_start_note == "", job.pk
    assert third.estimated_start >= second.estimated_start


@pytest.mark.django_db
@pytest.mark.parametrize("waiting", [1, 500])
def test_up_to_500_waiting_every_cycle_plans_once_with_the_estimates(waiting):
    from queues.reconcile.plan import refresh_begin

    for _ in range(2):
        refresh = refresh_begin(waiting)
        assert (refresh.full, refresh.after, refresh.holder) == (True, False, "")


@pytest.mark.django_db
@pytest.mark.parametrize("waiting", [501, 10_000])
def test_up_to_ten_thousand_waiting_a_refresh_comes_2_s_after_the_last_ended(waiting):
    """Not paced by its cost: however long a refresh took, the next may come 2 s after it."""
    from queues.models import Lease
    from queues.reconcile.plan import REASONS_EVERY_LEASE, refresh_begin, refresh_end

    first = refresh_begin(waiting)
    assert (first.full, first.after, first.lease) == (True, True, REASONS_EVERY_LEASE)
    assert not refresh_begin(waiting).full  # less than 2 s later
    first.cost = 30.0  # a slow refresh
    before = timezone.now()
    refresh_end(first)
    expires = Lease.objects.get(name=REASONS_EVERY_LEASE).expires_at
    assert before + timedelta(seconds=2) <= expires <= timezone.now() + timedelta(seconds=2)
    assert not refresh_begin(waiting).full
    Lease.objects.filter(name=REASONS_EVERY_LEASE).update(expires_at=timezone.now())
    assert refresh_begin(waiting).full


@pytest.mark.django_db
def test_past_ten_thousand_waiting_one_cycle_refreshes_then_a_lease_paces_the_next():
    from queues.reconcile.plan import refresh_begin

    first = refresh_begin(10_001)
    assert first.full and first.after and first.holder
    assert not refresh_begin(10_001).full  # the lease holds the next one off


@pytest.mark.parametrize(("cost", "pause"), [(0.1, 5), (1.5, 30), (3.2, 60), (20.0, 60)])
def test_a_long_queues_next_refresh_comes_twenty_times_its_cost_later_from_5_s_to_a_minute(
    cost, pause
):
    from queues.reconcile.plan import refresh_pause

    assert refresh_pause(cost) == timedelta(seconds=pause)


def test_under_churn_new_reasons_and_numbers_are_written_every_2_s_and_by_a_bursts_last(
    sim_cluster, cluster, mia, monkeypatch
):
    """While another cycle is already asked for, a cycle between refreshes admits as ever but
    leaves the read side (new jobs' reasons, the catalog's numbers) to a cycle at most 2 s
    later; the last cycle of a burst (none asked for after it) writes it."""
    import queues.reconcile.plan as plan
    from queues.models import Lease, QueueStats
    from queues.reconcile.cycle import READ_SIDE_LEASE

    monkeypatch.setattr(plan, "REASONS_ALL_UP_TO", 1)  # "long": more than one job waiting
    monkeypatch.setattr(plan, "FORECAST_FIRST_UP_TO", 1)
    for _ in range(2):
        submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)
    asked = [True]

    def cycle():
        return reconcile_cycle(cluster=cluster, now=sim_cluster.now(), follow_up=lambda: asked[0])

    cycle()  # the first refresh of all: reasons and numbers written
    stats_at = QueueStats.objects.values_list("computed_at", flat=True).first()
    # the next refresh not due yet (however slow this machine is today)
    assert Lease.objects.filter(name=plan.REASONS_LEASE).update(
        expires_at=timezone.now() + timedelta(minutes=1)
    )
    new = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)
    admitted = submit(mia, queue="interactive", capability="any-gpu", gpus_per_pod=1, pods=1)
    sim_cluster.advance(1)

    # the read side ran less than 2 s ago (however slow this machine is today)
    Lease.objects.filter(name=READ_SIDE_LEASE).update(
        expires_at=timezone.now() + timedelta(minutes=1)
    )

    busy = cycle()  # and another cycle is asked for

    assert busy.admitted == [admitted.pk] and "reasons" not in busy.steps
    new.refresh_from_db()
    assert (new.pending_reasons, new.position) == ([], None)
    assert QueueStats.objects.values_list("computed_at", flat=True).first() == stats_at
    Lease.objects.filter(name=READ_SIDE_LEASE).update(expires_at=timezone.now())

    cycle()  # 2 s later: due again, though asked for again

    new.refresh_from_db()
    assert new.pending_reasons and new.position == 3
    assert QueueStats.objects.values_list("computed_at", flat=True).first() > stats_at
    last = submit(mia, queue="batch", capability="min-40gb", gpus_per_pod=8, pods=4)
    asked[0] = False

    cycle()  # the burst's last: written at once

    last.refresh_from_db()
    assert last.pending_reasons and last.position == 4


def test_running_twice_changes_nothing_more(sim_cluster, cycle, mia):
    submit(mia, capability="min-40gb")
    cycle()
    sim_cluster.advance(30)
    cycle()
    jobs_before = list(Job.objects.values_list("id", "state", "started_at"))
    intervals_before = list(UsageInterval.objects.values_list("pod_uid", "started_at", "ended_at"))

    again = cycle()

    assert list(Job.objects.values_list("id", "state", "started_at")) == jobs_before
    assert (
        list(UsageInterval.objects.values_list("pod_uid", "started_at", "ended_at"))
        == intervals_before
    )
    assert again.jobs_created == 0 and again.admitted == []


def test_gpus_held_outside_the_portal_are_mirrored(sim_cluster, cycle):
    sim_cluster.create_foreign_pod(gpus=3, node="h100-02")
    sim_cluster.advance(5)

    cycle()

    node = Node.objects.get(name="h100-02")
    assert node.outside_devices == {"gpu": 3}
    assert node.gpus_used_outside == Decimal(3)


def small_cluster(*groups: dict) -> dict:
    return {
        "simulation": {"default_duration_seconds": 1800, "image_pull_seconds": 0},
        "node_groups": list(groups),
    }


def gpu_group(name: str, product: str, count: int, nodes: list[str], **extra) -> dict:
    return {
        "name": name,
        "labels": {
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(count),
            "network.gpuportal.io/domain": "ib-a",
            "topology.kubernetes.io/rack": "rack-1",
        },
        "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(count)},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "nodes": [{"name": n} for n in nodes],
        **extra,
    }


@pytest.fixture
def l4_cluster(sim_cluster_factory, example_policy):
    """One node of 4 L4s; search holds a standing reservation of all 4; vision may only borrow."""
    from queues.models import Quota, Reservation

    Reservation.objects.filter(name="speech-inference").delete()
    Quota.objects.filter(team__name="vision", gpu_class__name="l4").update(
        nominal=0, borrowing_limit=4
    )
    sim = sim_cluster_factory(nodes=small_cluster(gpu_group("l4", "NVIDIA-L4", 4, ["l4-a"])))
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    yield sim, adapter
    adapter.close()


def test_a_reservation_holder_reclaims_its_gpus_from_borrowing_batch_work(l4_cluster, mia, sara):
    sim, adapter = l4_cluster

    def cycle():
        return reconcile_cycle(cluster=adapter, now=sim.now())

    batch = submit(mia, queue="batch", capability="inference-16gb", gpus_per_pod=4, seconds=100_000)
    cycle()
    sim.advance(10)
    cycle()
    batch.refresh_from_db()
    assert (batch.state, batch.capacity_kind) == (JobState.RUNNING, "borrowed")

    inference = submit(
        sara, team="search", queue="inference", capability="inference-16gb", gpus_per_pod=4
    )
    first = cycle()

    batch.refresh_from_db()
    inference.refresh_from_db()
    assert first.preempted == [batch.pk]
    assert (batch.state, batch.terminating) == (JobState.PREEMPTED, True)
    assert inference.state == JobState.PENDING
    sim.advance(60)  # the batch pods get their grace period, then go
    cycle()
    cycle()

    batch.refresh_from_db()
    inference.refresh_from_db()
    assert (batch.state, batch.attempts) == (JobState.PENDING, 1)
    assert (inference.state, inference.capacity_kind) == (JobState.RUNNING, "reserved")
    assert [e.kind for e in batch.events.all()] == ["admitted", "started", "preempted", "requeued"]
    interval = UsageInterval.objects.get(job=batch)
    assert interval.ended_at is not None


def test_cancelling_a_running_job_deletes_its_kubernetes_job(sim_cluster, cycle, mia):
    from queues.jobs.services import job_cancel

    job = submit(mia, capability="min-40gb", seconds=100_000)
    cycle()
    sim_cluster.advance(10)
    cycle()
    job.refresh_from_db()

    job = job_cancel(job=job, by=mia)

    assert (job.state, job.terminating) == (JobState.CANCELLED, True)
    report = cycle()
    assert report.jobs_deleted == 1
    sim_cluster.advance(60)
    cycle()
    job.refresh_from_db()
    assert not job.terminating
    assert UsageInterval.objects.get(job=job).ended_at is not None


def test_a_job_deleted_outside_the_portal_fails_and_its_usage_closes(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb", seconds=100_000)
    cycle()
    sim_cluster.advance(10)
    cycle()
    job.refresh_from_db()

    sim_cluster.delete_job_out_of_band(job.team.namespace, job.k8s_job_name)
    cycle()

    job.refresh_from_db()
    assert (job.state, job.failure_reason) == (JobState.FAILED, "deleted outside the portal")
    sim_cluster.advance(60)
    cycle()
    interval = UsageInterval.objects.get(job=job)
    assert interval.ended_at is not None


def test_a_pod_deleted_outside_the_portal_fails_its_job_at_once_shown_stopping(
    sim_cluster, cycle, mia, client
):
    """``kubectl delete pod`` on a running job: its Job replaces no pod, so the job has failed;
    it says so in those words in the next cycle (not "running" through the grace period, then
    "BackoffLimitExceeded"), shows stopping until its pod is gone, and its GPUs free then."""
    job = submit(mia, capability="min-40gb", seconds=100_000)
    cycle()
    sim_cluster.advance(10)
    cycle()
    (pod,) = sim_cluster.cluster.store.items("pods", job.team.namespace)
    name = pod["metadata"]["name"]
    sim_cluster.cluster.delete_pod(job.team.namespace, name, grace_seconds=30)
    deadline = sim_cluster.now() + timedelta(seconds=30)

    cycle()

    job.refresh_from_db()
    assert (job.state, job.failure_reason, job.terminating) == (
        JobState.FAILED,
        "pod deleted outside the portal",
        True,
    )
    (event,) = job.events.filter(kind="failed")
    assert event.message == (
        f"pod {name} was deleted outside the portal (kubectl delete pod, or an eviction); its "
        f"pods end by {deadline:%Y-%m-%d %H:%M} UTC and give their GPUs back"
    )
    client.force_login(mia)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="stopping"' in page
    sim_cluster.advance(40)
    cycle()
    cycle()
    job.refresh_from_db()
    assert (job.state, job.terminating) == (JobState.FAILED, False)
    assert [e.kind for e in job.events.all()] == ["admitted", "started", "failed"]


def test_a_refused_create_is_retried_then_fails_with_the_apis_message(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb")
    sim_cluster.fail_requests(
        3, status=403, method="POST", path="/jobs$", message="jobs.batch is forbidden"
    )

    cycle()
    cycle()
    cycle()

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.failure_reason == "cluster refused: jobs.batch is forbidden"
    assert [e.kind for e in job.events.all()] == [
        "admitted",
        "cluster refused",
        "cluster refused",
        "failed",
    ]


def test_an_unreachable_cluster_shows_on_pending_jobs_and_the_next_cycle_catches_up(
    sim_cluster, cycle, mia
):
    from queues.models import ClusterStatus

    job = submit(mia, capability="min-40gb")
    sim_cluster.fail_requests(1, status=503, method="GET")

    report = cycle()

    job.refresh_from_db()
    assert report.unreachable
    assert job.state == JobState.PENDING
    assert job.pending_reasons[0]["code"] == "ClusterUnreachable"
    assert ClusterStatus.objects.get().unreachable_since is not None

    cycle()

    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert ClusterStatus.objects.get().reachable


def test_an_image_that_cannot_be_pulled_fails_the_job_in_plain_words(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb", image="registry.example/does-not-exist:1")
    cycle()
    sim_cluster.advance(30)

    cycle()

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.failure_reason.startswith(("ErrImagePull", "ImagePullBackOff"))


def test_an_oom_killed_pod_fails_the_job_with_the_reason(sim_cluster, cycle, mia):
    job = submit(mia, capability="min-40gb", seconds=100_000)
    cycle()
    sim_cluster.advance(10)
    cycle()
    pod = sim_cluster.core().list_namespaced_pod(job.team.namespace).items[0]

    sim_cluster.oom_kill(job.team.namespace, pod.metadata.name)
    sim_cluster.advance(5)
    cycle()

    job.refresh_from_db()
    assert (job.state, job.failure_reason, job.exit_code) == (JobState.FAILED, "OOMKilled", 137)


def test_the_creates_are_answered_while_the_read_side_is_written_and_noted_if_it_fails(
    sim_cluster, cluster, mia, monkeypatch
):
    import queues.reconcile.cycle as reconcile

    first = submit(mia, capability="min-40gb", gpus_per_pod=1)
    second = submit(mia, capability="min-40gb", gpus_per_pod=1)
    report = reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    # the creates' answers are noted last, after what is for reading
    assert list(report.steps)[-1] == "cluster (answers)"
    assert report.jobs_created == 2

    def failing(*args, **kwargs):
        raise RuntimeError("the database went away")

    third = submit(mia, capability="min-40gb", gpus_per_pod=1)
    monkeypatch.setattr(reconcile, "pending_reasons_store", failing)
    monkeypatch.setattr(reconcile, "queue_stats_refresh", failing)
    with pytest.raises(RuntimeError):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    # the cycle failed after sending the create: the Job exists and the job knows its name
    names = {j.metadata.name for j in sim_cluster.batch().list_namespaced_job("team-vision").items}
    jobs = Job.objects.filter(pk__in=[first.pk, second.pk, third.pk])
    assert names == {f"gpuportal-job-{job.pk}" for job in jobs}
    assert {job.k8s_job_name for job in jobs} == names


def test_a_cycle_with_a_follow_up_asked_for_leaves_its_unanswered_creates_to_it(
    sim_cluster, cluster, mia, monkeypatch
):
    import threading

    import queues.reconcile.plan as plan

    answered = threading.Event()
    sent: list[str] = []
    real = cluster.create_job

    def slow(manifest):
        sent.append(manifest["metadata"]["name"])
        answered.wait(timeout=30)  # the cluster answers once the test says so
        return real(manifest)

    monkeypatch.setattr(cluster, "create_job", slow)
    job = submit(mia, capability="min-40gb", gpus_per_pod=1, seconds=600)
    first = reconcile_cycle(cluster=cluster, now=sim_cluster.now(), follow_up=lambda: True)
    # admitted and its create sent; the cycle did not wait for the answer
    job.refresh_from_db()
    assert first.admitted == [job.pk] and first.jobs_created == 0
    assert (job.state, job.k8s_job_name) == (JobState.ADMITTED, "")
    # a cycle while the answer is still out does not send the create again
    middle = reconcile_cycle(cluster=cluster, now=sim_cluster.now(), follow_up=lambda: True)
    assert middle.jobs_created == 0 and len(sent) == 1

    answered.set()
    for _ in range(100):  # the answer comes in the background
        if all(f.done() for creates in plan._UNNOTED for f in creates.outcomes):
            break
        time.sleep(0.1)
    sim_cluster.advance(30)
    second = reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    # the follow-up noted the answer before its sync, so the job started in it; the create
    # was not sent again
    job.refresh_from_db()
    assert second.jobs_created == 1
    assert (job.state, job.k8s_job_name) == (JobState.RUNNING, f"gpuportal-job-{job.pk}")
    assert sent == [f"gpuportal-job-{job.pk}"]


class Crash(Exception):
    """Stands for the worker being killed at that point (the one thing a test cannot do for
    real inside its own process)."""


STEPS = [
    "nodes_sync",
    "jobs_sync",
    "usage_sync",
    "plan_apply",
    "cluster_apply",
    "pending_reasons_store",
    "queue_estimates_store",
    "queue_stats_refresh",
]
CYCLES = ["admitting", "starting", "finishing"]
# Every step boundary in each cycle of a job's life, and the moment right after the Job was
# created in the cluster but before the portal noted it (a Job is created only when admitting).
CRASHES = [(step, n) for step in STEPS for n in range(3)] + [("create_job", 0)]


@pytest.mark.parametrize(
    ("point", "crash_in_cycle"), CRASHES, ids=[f"{p}-{CYCLES[n]}" for p, n in CRASHES]
)
def test_a_crash_at_any_step_loses_nothing_and_duplicates_nothing(
    sim_cluster, cluster, mia, monkeypatch, point, crash_in_cycle
):
    import queues.reconcile.cycle as reconcile

    job = submit(mia, capability="min-40gb", pods=2, gpus_per_pod=1, seconds=600)
    cycles = {"n": 0, "crashes": 0}

    def crashing(real):
        def wrapper(*args, **kwargs):
            result = real(*args, **kwargs)  # the step's writes are done (and committed) …
            if cycles["n"] == crash_in_cycle:
                raise Crash(point)  # … and the process dies before the next step
            return result

        return wrapper

    if point == "create_job":
        monkeypatch.setattr(cluster, "create_job", crashing(cluster.create_job))
    else:
        monkeypatch.setattr(reconcile, point, crashing(getattr(reconcile, point)))

    def cycle():
        try:
            reconcile.reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        except Crash:
            cycles["crashes"] += 1
        cycles["n"] += 1

    for advance in (0, 30, 600, 5, 5):
        sim_cluster.advance(advance)
        cycle()

    assert cycles["crashes"] == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    k8s_jobs = sim_cluster.batch().list_namespaced_job(job.team.namespace).items
    assert [j.metadata.name for j in k8s_jobs] == [f"gpuportal-job-{job.pk}"]
    intervals = list(UsageInterval.objects.filter(job=job))
    assert len(intervals) == 2
    for interval in intervals:
        assert interval.ended_at - interval.started_at == timedelta(seconds=600)
        assert not interval.end_estimated
    assert [e.kind for e in job.events.all()] == ["admitted", "started", "succeeded"]


def test_a_job_with_the_portals_labels_but_unknown_to_it_is_reported_not_deleted(
    sim_cluster, cycle, mia
):
    from queues.cluster.manifests import LaunchSpec, job_manifest
    from queues.models import ClusterStatus

    stray = job_manifest(
        LaunchSpec(
            job_id=99999,
            namespace="team-vision",
            team="vision",
            queue="batch",
            image="registry.example/x:1",
            command=["true"],
            args=[],
            env={},
            nodes=["a100-01"],
            devices_per_pod=1,
        )
    )
    sim_cluster.core().create_namespace({"metadata": {"name": "team-vision"}})
    sim_cluster.batch().create_namespaced_job("team-vision", stray)

    cycle()
    cycle()

    assert ClusterStatus.objects.get().unknown_jobs == ["team-vision/gpuportal-job-99999"]
    names = [j.metadata.name for j in sim_cluster.batch().list_namespaced_job("team-vision").items]
    assert names == ["gpuportal-job-99999"]


def test_each_cycle_publishes_every_queues_expected_wait_per_team(sim_cluster, cycle, mia):
    from queues.models import QueueEstimate

    cycle()

    estimates = {
        (e.queue.name, e.team.name): e
        for e in QueueEstimate.objects.select_related("queue", "team")
    }
    # An idle cluster: the default job of every queue starts now, for every team that may use it.
    assert estimates[("batch", "vision")].estimated_start == sim_cluster.now()
    assert estimates[("training", "nlp")].estimated_start == sim_cluster.now()
    assert ("inference", "vision") not in estimates
    # inference runs only on reservations: search holds one, so its default job starts now too.
    assert estimates[("inference", "search")].estimated_start == sim_cluster.now()


def test_each_cycle_refreshes_the_catalogs_numbers(sim_cluster, cycle, mia):
    from decimal import Decimal

    from queues.models import QueueStats

    submit(mia, queue="training", capability="bf16-large", pods=1, gpus_per_pod=4)
    cycle()

    stats = QueueStats.objects.get(queue__name="training")
    assert (stats.pending, stats.running) == (0, 0)  # admitted: neither waiting nor running yet
    # 2 whole-GPU A100 nodes (16) + the MIG node's slices (28 × 1/7 + 8 × 3/7), 4 now held.
    assert Decimal(stats.free["a100-80gb"]) == Decimal("19.43")
    assert Decimal(stats.free["h100-80gb"]) == Decimal("32.00")  # h100-05 is in maintenance


def test_a_mig_job_runs_on_a_slice_and_is_counted_as_its_share(sim_cluster, cycle, mia):
    from fractions import Fraction

    job = submit(mia, queue="interactive-mig", capability="mig-1g.10gb", mig_profile="1g.10gb")
    cycle()
    sim_cluster.advance(10)
    cycle()

    job.refresh_from_db()
    assert (job.state, job.nodes) == (JobState.RUNNING, ["a100-03"])
    pod = sim_cluster.core().list_namespaced_pod(job.team.namespace).items[0]
    assert pod.spec.containers[0].resources.limits["nvidia.com/mig-1g.10gb"] == "1"
    interval = UsageInterval.objects.get(job=job)
    assert (interval.devices, interval.share) == (1, Fraction(1, 7))


def test_a_time_sliced_job_holds_one_replica(sim_cluster, cycle, mia):
    from fractions import Fraction

    job = submit(mia, queue="interactive", capability="any-gpu", declared_gpu_memory_gb=8)
    cycle()
    sim_cluster.advance(10)
    cycle()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.nodes[0].startswith("t4-")
    assert UsageInterval.objects.get(job=job).share == Fraction(1, 4)


def test_a_pod_too_big_for_the_cheaper_classs_nodes_runs_on_a_class_that_can_hold_it(
    sim_cluster, cycle, mia
):
    # The A100 nodes allocate 126 cores, the H100 nodes 190 (examples/cluster.yaml); A100s are
    # the cheaper class, and vision's A100 quota takes one 4-GPU job.
    big = submit(
        mia,
        queue="training",
        capability="bf16-large",
        gpus_per_pod=4,
        cpu_millicores_per_pod=150_000,
    )
    cycle()
    small = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=4)
    cycle()
    sim_cluster.advance(10)
    cycle()

    small.refresh_from_db()
    big.refresh_from_db()
    assert (small.gpu_class.name, small.state) == ("a100-80gb", JobState.RUNNING)
    assert (big.gpu_class.name, big.state) == ("h100-80gb", JobState.RUNNING)


def a100_pair(sim_cluster_factory, b_cpu: str = "64"):
    from queues.models import Quota

    Quota.objects.filter(team__name="vision", gpu_class__name="a100-80gb").update(nominal=16)
    a = gpu_group("a100", "NVIDIA-A100-SXM4-80GB", 8, ["a100-a"])
    b = gpu_group("a100-b", "NVIDIA-A100-SXM4-80GB", 8, ["a100-b"])
    b["allocatable"]["cpu"] = b_cpu
    return sim_cluster_factory(nodes=small_cluster(a, b))


@pytest.fixture
def cpu_starved(sim_cluster_factory, example_policy):
    """Two A100 nodes of 64 cores; someone else's CPU-only pod holds 40 cores of a100-b. The
    portal counts GPUs, not the CPU other pods use: only the cluster's scheduler can tell."""
    sim = a100_pair(sim_cluster_factory)
    core = sim.core()
    core.create_namespace({"metadata": {"name": "etl"}})
    core.create_namespaced_pod(
        "etl",
        {
            "metadata": {"name": "etl-1", "annotations": {DURATION_ANNOTATION: "inf"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "a100-b"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "restartPolicy": "Never",
                "containers": [
                    {"name": "etl", "image": "etl:1", "resources": {"limits": {"cpu": "40"}}}
                ],
            },
        },
    )
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    yield sim, adapter
    adapter.close()


def test_a_gang_is_not_admitted_onto_a_node_too_small_for_its_pods(
    sim_cluster_factory, example_policy, mia
):
    sim = a100_pair(sim_cluster_factory, b_cpu="16")  # a100-b allocates 16 cores
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    try:
        job = stuck_gang(mia)
        reconcile_cycle(cluster=adapter, now=sim.now())
    finally:
        adapter.close()

    job.refresh_from_db()
    assert job.state == JobState.PENDING
    [reason] = job.pending_reasons
    assert reason["code"] == "NeverFits"
    assert (
        "a100-80gb: 2 pods × 8 GPUs fit only with less CPU or memory per pod: 1 of its 2 "
        in (reason["message"])
    )
    assert reason["hint"] == (
        "node a100-b (a100-80gb) allocates 16 CPU cores and 524,288 MiB memory: "
        "ask for at most that per pod"
    )


def stuck_gang(mia) -> Job:
    """Two pods of 8 GPUs and 32 cores: one for a100-a, one for a100-b."""
    return submit(
        mia,
        queue="training",
        capability="bf16-large",
        pods=2,
        gpus_per_pod=8,
        cpu_millicores_per_pod=32_000,
        seconds=3600,
    )


def test_the_schedulers_message_reaches_the_job_and_a_stuck_gang_is_rolled_back(cpu_starved, mia):
    from queues.admission.reasons import time_text

    sim, adapter = cpu_starved

    def cycle():
        return reconcile_cycle(cluster=adapter, now=sim.now())

    job = stuck_gang(mia)
    cycle()
    sim.advance(5)
    cycle()

    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    reason = job.pending_reasons[0]
    assert reason["code"] == "ClusterUnschedulable"
    said = reason["details"]["scheduler_message"]
    assert "Insufficient cpu" in said
    assert reason["message"] == f"admitted, but the cluster's scheduler cannot place a pod: {said}"

    sim.advance(6 * 60)
    cycle()

    job.refresh_from_db()
    assert (job.state, job.rollbacks) == (JobState.PREEMPTED, 1)
    rollback = job.events.get(kind="rolled back")
    assert rollback.message == (
        f"only 1 of 2 pods started within 5 minutes; the scheduler said: {said}; "
        "back in the queue once its pods are gone, held back 1 minute"
    )
    assert (rollback.details["rollbacks"], rollback.details["backoff_seconds"]) == (1, 60)

    sim.advance(11 * 60)  # the running pod gets training's 10-minute grace period
    cycle()

    # Requeued, its attempt counted, and held back a minute from now: not admitted straight
    # back into the same stuck state, and it says why, with the scheduler's words.
    job.refresh_from_db()
    requeued_at = job.events.get(kind="requeued").at
    assert (job.state, job.attempts) == (JobState.PENDING, 1)
    assert job.not_before == requeued_at + timedelta(minutes=1)
    assert [r["code"] for r in job.pending_reasons] == ["ClusterUnschedulable"]
    retry = datetime.fromtimestamp(math.ceil(job.not_before.timestamp() / 60) * 60, UTC)
    assert job.pending_reasons[0]["message"] == (
        f"rolled back once: the cluster could not start it; the scheduler said: "
        f"{said}; the portal tries again at {time_text(retry)}"
    )
    assert job.pending_reasons[0]["details"]["rollbacks"] == 1

    sim.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.PENDING

    sim.advance(31)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    # Admission ends the hold (a preemption before it starts requeues it without one); the
    # count of roll-backs in a row stays until it starts, so the next back-off is longer.
    assert (job.not_before, job.rollbacks) == (None, 1)
    assert [e.kind for e in job.events.all()] == ["admitted", "rolled back", "requeued", "admitted"]


def test_a_job_held_back_does_not_hold_up_the_jobs_behind_it(cpu_starved, mia):
    sim, adapter = cpu_starved

    def cycle():
        return reconcile_cycle(cluster=adapter, now=sim.now())

    stuck = stuck_gang(mia)
    cycle()
    sim.advance(6 * 60)
    cycle()
    sim.advance(11 * 60)
    cycle()  # requeued and held back
    small = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=8, seconds=600)
    cycle()

    stuck.refresh_from_db()
    small.refresh_from_db()
    assert (stuck.state, small.state) == (JobState.PENDING, JobState.ADMITTED)


def test_a_job_that_starts_after_roll_backs_is_backed_off_no_more(cpu_starved, mia):
    sim, adapter = cpu_starved
    job = stuck_gang(mia)
    Job.objects.filter(pk=job.pk).update(rollbacks=3, not_before=sim.now())
    # Now it asks for what a100-b has left: both pods start.
    Job.objects.filter(pk=job.pk).update(cpu_millicores_per_pod=8_000)
    reconcile_cycle(cluster=adapter, now=sim.now())
    sim.advance(5)
    reconcile_cycle(cluster=adapter, now=sim.now())

    job.refresh_from_db()
    assert (job.state, job.rollbacks, job.not_before) == (JobState.RUNNING, 0, None)


@pytest.mark.parametrize(
    ("rollbacks", "minutes"), [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (40, 60)]
)
def test_the_back_off_doubles_to_an_hour(rollbacks, minutes):
    from queues.reconcile.jobs import rollback_backoff

    assert rollback_backoff(rollbacks) == timedelta(minutes=minutes)


def test_a_burst_of_requests_enqueues_one_reconcile(django_capture_on_commit_callbacks, settings):
    from queues.reconcile.tasks import request_reconcile

    settings.RECONCILE_ON_COMMIT = True
    with django_capture_on_commit_callbacks() as callbacks:
        results = [request_reconcile() for _ in range(20)]

    assert results == [True] + [False] * 19
    assert len(callbacks) == 1


def test_with_the_watch_fed_mirror_a_cycle_calls_the_api_only_for_what_changed(
    sim_cluster, cluster, mia
):
    import time

    from queues.cluster.mirror import ClusterMirror

    mirror = ClusterMirror(cluster).start()
    try:
        assert mirror.wait_synced(10)

        def cycle():
            return reconcile_cycle(cluster=cluster, now=sim_cluster.now(), mirror=mirror)

        idle = cycle()
        job = submit(mia, capability="min-40gb", seconds=600)
        admitting = cycle()
        deadline = time.monotonic() + 10
        while (
            not any(
                p["metadata"].get("labels", {}).get("gpuportal.io/job-id") == str(job.pk)
                for p in mirror.items("pods")
            )
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        sim_cluster.advance(30)

        def started():
            return any(
                (p.get("status", {}).get("containerStatuses") or [{}])[0]
                .get("state", {})
                .get("running")
                for p in mirror.items("pods")
                if p["metadata"].get("labels", {}).get("gpuportal.io/job-id") == str(job.pk)
            )

        while not started() and time.monotonic() < deadline + 10:
            time.sleep(0.05)
        starting = cycle()
    finally:
        mirror.stop()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert idle.api_calls == 0
    # Read the team's namespace, create it, create the Job: the watches bring the rest.
    assert admitting.api_calls == 3
    assert starting.api_calls == 0


def test_a_create_that_times_out_but_happened_is_not_made_twice(sim_cluster, mia):
    # The cluster creates the Job but answers after the client gave up: the portal cannot know
    # whether it happened. The next cycle's create finds its own Job and takes that as success.
    impatient = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig), timeout=(1, 0.5))
    job = submit(mia, capability="min-40gb", seconds=600)
    sim_cluster.delay_requests(2, count=1, method="POST", path="/jobs$", after=True)
    try:
        first = reconcile_cycle(cluster=impatient, now=sim_cluster.now())
        job.refresh_from_db()
        assert first.unreachable and job.state == JobState.ADMITTED and job.k8s_job_name == ""

        second = reconcile_cycle(cluster=impatient, now=sim_cluster.now())
    finally:
        impatient.close()

    job.refresh_from_db()
    assert second.jobs_created == 0  # it already existed
    assert job.k8s_job_name == f"gpuportal-job-{job.pk}"
    names = [
        j.metadata.name for j in sim_cluster.batch().list_namespaced_job(job.team.namespace).items
    ]
    assert names == [f"gpuportal-job-{job.pk}"]


def test_a_cancelled_jobs_gpus_stay_held_until_its_pods_are_gone(
    sim_cluster_factory, example_policy, mia
):
    """training gives pods 10 minutes to stop: a job needing the GPUs of a cancelled one is not
    admitted onto them meanwhile, and is as soon as the pods are gone."""
    from queues.jobs.services import job_cancel

    sim = sim_cluster_factory(
        nodes=small_cluster(gpu_group("h100", "NVIDIA-H100-80GB-HBM3", 8, ["h100-a"]))
    )
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))

    def cycle():
        reconcile_cycle(cluster=adapter, now=sim.now())

    try:
        first = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=8, seconds=3600)
        cycle()
        sim.advance(30)
        cycle()
        first.refresh_from_db()
        assert first.state == JobState.RUNNING
        job_cancel(job=first, by=mia)
        cycle()  # the Job is deleted; its pods get the queue's 10 minutes
        second = submit(mia, team="nlp", queue="training", capability="bf16-large", gpus_per_pod=8)

        cycle()
        sim.advance(5 * 60)
        cycle()

        second.refresh_from_db()
        assert second.state == JobState.PENDING
        assert second.pending_reasons[0]["code"] == "InsufficientCapacity"
        sim.advance(6 * 60)
        cycle()  # the pods are gone: the GPUs are free
        cycle()
        second.refresh_from_db()
        assert second.state in (JobState.ADMITTED, JobState.RUNNING)
        first.refresh_from_db()
        assert (first.state, first.terminating) == (JobState.CANCELLED, False)
    finally:
        adapter.close()


@pytest.fixture
def one_h100(sim_cluster_factory, example_policy):
    sim = sim_cluster_factory(
        nodes=small_cluster(gpu_group("h100", "NVIDIA-H100-80GB-HBM3", 8, ["h100-a"]))
    )
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    yield sim, adapter
    adapter.close()


def test_a_job_whose_only_node_is_not_ready_waits_unhealthy(one_h100, mia):
    """The node lifecycle controller taints a not-ready node (node.kubernetes.io/not-ready):
    a state the portal reads as health, not a foreign taint the queue fails to tolerate."""
    sim, adapter = one_h100
    sim.cluster.set_node_ready("h100-a", ready=False)
    taints = {t.key for t in sim.core().read_node("h100-a").spec.taints}
    assert "node.kubernetes.io/not-ready" in taints
    job = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=8)

    reconcile_cycle(cluster=adapter, now=sim.now())

    job.refresh_from_db()
    assert job.state == JobState.PENDING
    binding = job.pending_reasons[0]
    assert binding["code"] == "Unhealthy"
    assert "h100-a" in binding["message"]
    sim.cluster.set_node_ready("h100-a", ready=True)
    reconcile_cycle(cluster=adapter, now=sim.now())
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED


def test_a_job_whose_only_node_is_cordoned_waits_for_maintenance(one_h100, mia):
    """kubectl cordon: spec.unschedulable and the node.kubernetes.io/unschedulable taint."""
    sim, adapter = one_h100
    sim.core().patch_node("h100-a", {"spec": {"unschedulable": True}})
    job = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=8)

    reconcile_cycle(cluster=adapter, now=sim.now())

    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.pending_reasons[0]["code"] == "Maintenance"
    assert "h100-a" in job.pending_reasons[0]["message"]


def test_pods_orphaned_by_a_job_deleted_outside_are_stopped_and_held_until_gone(one_h100, mia):
    """kubectl delete job --cascade=orphan: the Job goes, its pods run on holding GPUs. The
    portal stops them, does not admit anyone onto their GPUs meanwhile, and closes their usage
    once, when they really end."""
    sim, adapter = one_h100

    def cycle():
        return reconcile_cycle(cluster=adapter, now=sim.now())

    first = submit(mia, queue="training", capability="bf16-large", gpus_per_pod=8, seconds=7200)
    cycle()
    sim.advance(30)
    cycle()
    first.refresh_from_db()
    assert first.state == JobState.RUNNING
    sim.delete_job_out_of_band(first.team.namespace, first.k8s_job_name, propagation="Orphan")
    second = submit(mia, team="nlp", queue="training", capability="bf16-large", gpus_per_pod=8)

    report = cycle()  # the Job is gone: the job fails, its orphaned pods are told to stop

    first.refresh_from_db()
    assert (first.state, first.failure_reason) == (JobState.FAILED, "deleted outside the portal")
    assert first.terminating
    assert report.orphans_deleted == 1
    second.refresh_from_db()
    assert second.state == JobState.PENDING  # the orphan's GPUs are not free yet
    sim.advance(11 * 60)  # training gives pods 10 minutes to stop
    cycle()
    cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    assert not first.terminating
    assert second.state in (JobState.ADMITTED, JobState.RUNNING)
    [interval] = UsageInterval.objects.filter(job=first)
    assert interval.ended_at is not None
    assert interval.ended_at <= sim.now()


def test_a_cycle_before_the_watch_reports_a_created_job_does_not_take_it_for_deleted(
    sim_cluster, cluster, mia
):
    """Under churn the next cycle can start before the watch has brought the ADDED event of the
    Job the last one created; the job stays admitted (it failed as "deleted outside the
    portal" in a replay before the mirror counted its own creates)."""
    from queues.cluster.mirror import ClusterMirror

    mirror = ClusterMirror(cluster).start()
    try:
        assert mirror.wait_synced(10)
        mirror.followers["jobs"].stopping.set()  # the Jobs' watch reports nothing more

        def cycle():
            return reconcile_cycle(cluster=cluster, now=sim_cluster.now(), mirror=mirror)

        job = submit(mia, capability="min-40gb", seconds=600)
        assert cycle().jobs_created == 1

        again = cycle()
    finally:
        mirror.stop()

    job.refresh_from_db()
    assert (job.state, job.failure_reason) == (JobState.ADMITTED, "")
    assert again.transitions == {}


def test_a_job_created_by_another_process_is_given_time_to_reach_this_ones_watch(
    sim_cluster, cluster, mia
):
    """Two worker processes take turns running cycles, each with its own mirror: the one that
    did not create a Job learns of it only from its watch. Its cycle waits 30 s for the Job to
    show before it takes it for deleted outside the portal."""
    from queues.cluster.mirror import ClusterMirror
    from queues.reconcile.jobs import JOB_SHOW_GRACE

    elsewhere = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))  # the other process's
    creator, other = ClusterMirror(cluster), ClusterMirror(elsewhere)
    for mirror in (creator, other):
        mirror.start()
    try:
        assert creator.wait_synced(10) and other.wait_synced(10)
        other.followers["jobs"].stopping.set()  # its Jobs' watch lags: it reports nothing more
        job = submit(mia, capability="min-40gb", seconds=600)
        reconcile_cycle(cluster=cluster, now=sim_cluster.now(), mirror=creator)

        reconcile_cycle(cluster=elsewhere, now=sim_cluster.now(), mirror=other)

        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        sim_cluster.advance(JOB_SHOW_GRACE.total_seconds())
        reconcile_cycle(cluster=elsewhere, now=sim_cluster.now(), mirror=other)
    finally:
        creator.stop()
        other.stop()
        elsewhere.close()

    job.refresh_from_db()
    assert (job.state, job.failure_reason) == (JobState.FAILED, "deleted outside the portal")
