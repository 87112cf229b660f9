"""A real Celery worker (with beat) against a private Redis, SIGKILLed in the middle of its work
and started again: each admitted job ends with exactly one Kubernetes Job, each pod with exactly
one usage interval whose times are the pod's own."""

from __future__ import annotations

import pytest

from queues.models import CapabilityClass, Job, JobState, Queue, Team, UsageInterval
from tests.factories import JobFactory
from tests.faults.invariants import assert_no_over_admission, assert_nothing_lost, cluster_jobs
from tests.faults.processes import PrivateRedis, this_database_url, wait_until, worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis():
    server = PrivateRedis().start()
    yield server
    server.stop()


def submit(user, *, pods: int, seconds: int) -> Job:
    return JobFactory(
        owner=user,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        pods=pods,
        gpus_per_pod=1,
        env={"SIM_DURATION_SECONDS": str(seconds)},
    )


@pytest.mark.parametrize("point", ["create_job", "usage_opened", "usage_closed"])
def test_a_worker_killed_mid_cycle_and_restarted_loses_nothing_and_does_nothing_twice(
    tmp_path, sim_cluster, redis, mia, point
):
    jobs = [submit(mia, pods=2, seconds=600), submit(mia, pods=1, seconds=600)]
    env = {
        "DATABASE_URL": this_database_url(),
        "CELERY_BROKER_URL": redis.url,
        "CLUSTER_MODE": "kubeconfig",
        "KUBECONFIG": str(sim_cluster.kubeconfig),
        "RECONCILE_INTERVAL_SECONDS": "0.5",
        # A killed worker's lease runs out after this; the next worker's cycles wait that long.
        "RECONCILE_LEASE_SECONDS": "3",
    }
    first = worker(tmp_path, "first", pause_at=point, **env).start()
    second = worker(tmp_path, "second", **env)
    marker = tmp_path / "first.paused"
    killed = []

    def step(condition, what):
        """Wait for ``condition``; when the first worker reaches its point, kill it there and
        start the second."""

        def check():
            if not killed and marker.exists():
                first.kill()
                killed.append(True)
                second.start()
            return condition()

        return wait_until(check, seconds=90, what=f"{what}\n{first.output()[-3000:]}")

    try:
        step(lambda: set(cluster_jobs(sim_cluster)) == {j.pk for j in jobs}, "Jobs created")
        step(
            lambda: Job.objects.filter(k8s_job_name="").count() == 0,
            "the portal noted its Jobs",
        )
        sim_cluster.advance(30)
        step(
            lambda: (
                UsageInterval.objects.filter(ended_at__isnull=True).count() == 3
                and Job.objects.filter(state=JobState.RUNNING).count() == 2
            ),
            "the jobs run and their usage is open",
        )
        sim_cluster.advance(600)
        step(
            lambda: (
                Job.objects.filter(state=JobState.SUCCEEDED).count() == 2
                and UsageInterval.objects.filter(ended_at__isnull=True).count() == 0
            ),
            "the jobs succeeded and their usage closed",
        )
    finally:
        first.stop()
        second.stop()

    assert killed, f"the worker never reached {point}"
    assert_nothing_lost(sim_cluster)
    assert_no_over_admission()
    assert UsageInterval.objects.count() == 3
    for job in jobs:
        job.refresh_from_db()
        assert [e.kind for e in job.events.all()] == ["admitted", "started", "succeeded"]
