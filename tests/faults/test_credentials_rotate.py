"""The cluster's credentials change while a real Celery worker (with beat) runs: the simulated
API server restarts wanting a new token and the kubeconfig is renewed. The worker's next cycles
go through with no restart of the worker, and nothing is lost or done twice: one Kubernetes Job
per admitted job, one usage interval per pod, with the pod's own times."""

from __future__ import annotations

import json

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


def test_the_worker_picks_up_new_cluster_credentials_without_a_restart(
    tmp_path, sim_cluster, redis, mia
):
    env = {
        "DATABASE_URL": this_database_url(),
        "CELERY_BROKER_URL": redis.url,
        "CLUSTER_MODE": "kubeconfig",
        "KUBECONFIG": str(sim_cluster.kubeconfig),
        "RECONCILE_INTERVAL_SECONDS": "0.5",
    }
    process = worker(tmp_path, "worker", **env).start()

    def until(condition, what):
        return wait_until(condition, seconds=90, what=f"{what}\n{process.output()[-3000:]}")

    before = [submit(mia, pods=2, seconds=600)]
    try:
        until(lambda: set(cluster_jobs(sim_cluster)) == {j.pk for j in before}, "first Job made")
        sim_cluster.advance(30)
        until(
            lambda: Job.objects.filter(state=JobState.RUNNING).count() == 1,
            "the first job runs",
        )
        pid = process.process.pid

        # The control plane restarts with a new token; the kubeconfig is renewed with it.
        old_token = sim_cluster.server.token
        sim_cluster.rotate_token("rotated-token-for-the-test")
        after = [submit(mia, pods=1, seconds=300), submit(mia, pods=1, seconds=300)]

        until(
            lambda: set(cluster_jobs(sim_cluster)) == {j.pk for j in before + after},
            "Jobs made after the rotation",
        )
        sim_cluster.advance(30)
        until(
            lambda: (
                Job.objects.filter(state=JobState.RUNNING).count() == 3
                and UsageInterval.objects.filter(ended_at__isnull=True).count() == 4
            ),
            "every job runs and its usage is open",
        )
        sim_cluster.advance(600)
        until(
            lambda: (
                Job.objects.filter(state=JobState.SUCCEEDED).count() == 3
                and UsageInterval.objects.filter(ended_at__isnull=True).count() == 0
            ),
            "every job succeeded and its usage closed",
        )
        assert process.process.poll() is None and process.process.pid == pid
    finally:
        process.stop()

    assert_nothing_lost(sim_cluster)
    assert_no_over_admission()
    assert UsageInterval.objects.count() == 4
    for job in before + after:
        job.refresh_from_db()
        assert [e.kind for e in job.events.all()] == ["admitted", "started", "succeeded"]
    lines = [json.loads(line) for line in process.output().splitlines() if line.startswith("{")]
    reloads = [
        line["message"]
        for line in lines
        if line["message"].startswith("cluster credentials reloaded from the kubeconfig")
    ]
    assert reloads, "the worker never said it loaded the credentials again"
    # Neither token is ever written to the log.
    assert old_token not in process.output()
    assert "rotated-token-for-the-test" not in process.output()
