"""Two workers, each with its own beat (a second beat started by mistake), reconcile the same
database and cluster at once: the lease lets one cycle run at a time, so no job is admitted
twice, no GPU is promised twice and no job gets two Kubernetes Jobs."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from queues.models import CapabilityClass, Job, JobEvent, JobState, Queue, Team
from tests.factories import JobFactory
from tests.faults.invariants import assert_no_over_admission, assert_nothing_lost, cluster_jobs
from tests.faults.processes import PrivateRedis, this_database_url, wait_until, worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_two_beats_and_two_workers_never_over_admit_or_duplicate(tmp_path, sim_cluster, mia, sara):
    # More than the cluster holds: 24 jobs of 4 whole GPUs each.
    jobs = [
        JobFactory(
            owner=user,
            team=Team.objects.get(name=team),
            queue=Queue.objects.get(name="batch"),
            capability_class=CapabilityClass.objects.get(name="any-gpu"),
            pods=1,
            gpus_per_pod=4,
            env={"SIM_DURATION_SECONDS": "inf"},
        )
        for user, team in [(mia, "vision"), (sara, "search")] * 12
    ]
    redis = PrivateRedis().start()
    env = {
        "DATABASE_URL": this_database_url(),
        "CELERY_BROKER_URL": redis.url,
        "CLUSTER_MODE": "kubeconfig",
        "KUBECONFIG": str(sim_cluster.kubeconfig),
        "RECONCILE_INTERVAL_SECONDS": "0.3",
    }
    workers = [worker(tmp_path, name, **env).start() for name in ("one", "two")]

    def settled():
        admitted = set(Job.objects.exclude(state=JobState.PENDING).values_list("pk", flat=True))
        noted = not Job.objects.filter(state=JobState.ADMITTED, k8s_job_name="").exists()
        return admitted and noted and set(cluster_jobs(sim_cluster)) == admitted

    try:
        wait_until(settled, seconds=120, what="admitted jobs all have their Jobs")
        # Let both go on racing a while over a cluster that is full.
        before = Job.objects.exclude(state=JobState.PENDING).count()
        time.sleep(5)
        assert settled()
        assert Job.objects.exclude(state=JobState.PENDING).count() == before
    finally:
        for process in workers:
            process.stop()
        redis.stop()

    assert 0 < before < len(jobs)  # some were admitted, not all fit
    assert_nothing_lost(sim_cluster)
    assert_no_over_admission()
    admissions = Counter(JobEvent.objects.filter(kind="admitted").values_list("job_id", flat=True))
    assert set(admissions.values()) == {1}
    # Both took part: each received reconcile tasks from its own beat.
    for process in workers:
        assert "queues.reconcile" in process.output(), process.output()[-2000:]
