"""Redis stopped, then flushed, while members submit: every submission is accepted (the
database is the source of truth, the broker only nudges) and all converge once Redis is back."""

from __future__ import annotations

import pytest

from portal.models import ApiToken
from queues.models import Job, JobEvent, JobState
from tests.faults.http import call
from tests.faults.invariants import assert_nothing_lost, cluster_jobs
from tests.faults.processes import (
    PrivateRedis,
    free_port,
    this_database_url,
    wait_until,
    web,
    worker,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BODY = {
    "team": "vision",
    "queue": "batch",
    "capability_class": "min-40gb",
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
    "env": {"SIM_DURATION_SECONDS": "inf"},
}


@pytest.mark.parametrize(
    "cache",
    [
        pytest.param("locmem://", id="cache-elsewhere"),
        # Limits count in the broker's Redis: with it down they go uncounted, requests go on.
        pytest.param("", id="cache-on-the-same-redis"),
    ],
)
def test_submissions_are_accepted_without_redis_and_converge_when_it_is_back(
    tmp_path, sim_cluster, mia, cache
):
    _, token = ApiToken.issue(user=mia, name="script")
    redis = PrivateRedis().start()
    env = {
        "DATABASE_URL": this_database_url(),
        "CELERY_BROKER_URL": redis.url,
        "CLUSTER_MODE": "kubeconfig",
        "KUBECONFIG": str(sim_cluster.kubeconfig),
        "RECONCILE_ON_COMMIT": "true",
        "RECONCILE_INTERVAL_SECONDS": "0.5",
        "CACHE_URL": cache,
    }
    port = free_port()
    server = web(tmp_path, port, **env).start()
    portal = f"http://127.0.0.1:{port}"
    background = worker(tmp_path, "worker", **env)
    try:
        wait_until(lambda: _up(portal), seconds=60, what="the web server answers")

        redis.stop()
        down = [call(f"{portal}/api/jobs/", token=token, body=BODY) for _ in range(3)]

        assert [a.status for a in down] == [201, 201, 201], [a.body[:300] for a in down]
        accepted = [a.json()["id"] for a in down]
        assert (
            list(Job.objects.filter(pk__in=accepted).values_list("state", flat=True))
            == ["pending"] * 3
        )
        assert JobEvent.objects.filter(job_id__in=accepted, kind="submitted").count() == 3
        assert "could not ask for a reconcile, the broker is unavailable" in server.output()

        redis.start()
        background.start()
        # Flushed while more come in: queued requests and beat's messages are lost.
        for _ in range(3):
            redis.cli("flushall")
            answer = call(f"{portal}/api/jobs/", token=token, body=BODY)
            assert answer.status == 201, answer.body[:300]
            accepted.append(answer.json()["id"])
        redis.cli("flushall")

        wait_until(
            lambda: (
                set(cluster_jobs(sim_cluster)) == set(accepted)
                and not Job.objects.filter(k8s_job_name="").exists()
            ),
            seconds=90,
            what="every accepted job admitted with its Kubernetes Job",
        )
    finally:
        background.stop()
        server.stop()
        redis.stop()

    assert Job.objects.filter(state=JobState.ADMITTED).count() == 6
    assert_nothing_lost(sim_cluster)


def _up(portal: str) -> bool:
    try:
        return call(f"{portal}/healthz", timeout=5).status == 200
    except OSError:
        return False
