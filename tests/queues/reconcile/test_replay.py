"""A slice of Kueue's scheduler benchmark through the event-driven loop, as a correctness check.

One cohort (a GPU class of 120 GPUs, six teams) and a fifth of each stream's jobs — 600 jobs
arriving over 12 s — submitted at their times through the submission service, with the real
loop: a Celery worker on the configured broker, its watch-fed mirror asking for a cycle when
pods end, each commit asking for one, and the simulated cluster over HTTP on the wall clock
at speed 1. Not a timing test (``bench/bench_kueue_replay.py`` measures): it checks that every
job finishes exactly once, that the portal never held more GPUs than a class has or a team may
hold, and that every usage interval is its pod's run as the cluster reported it.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from celery.contrib.testing.worker import start_worker
from django.contrib.auth import get_user_model

from bench import kueue
from portal.celery import app
from queues.cluster.pods import pod_facts
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit_batch
from queues.models import CapabilityClass, Job, JobState, Queue, Team, UsageInterval
from queues.policy.apply import policy_apply
from queues.policy.text import policy_yaml
from queues.reconcile.tasks import worker_mirror_stop
from simcluster import SimCluster, SimServer, WallClock, parse_cluster

pytestmark = pytest.mark.django_db(transaction=True)
SCALE = 0.2  # of each stream's jobs: 70 small, 20 medium, 10 large per team


def requests_of(arrivals: list[kueue.Arrival], owner) -> list[JobRequest]:
    teams = {t.name: t for t in Team.objects.all()}
    queues = {q.name: q for q in Queue.objects.all()}
    capability = CapabilityClass.objects.get(name=kueue.CAPABILITY)
    names = {"team": teams, "queue": queues, "capability_class": {kueue.CAPABILITY: capability}}
    return [
        JobRequest.of(
            owner=owner,
            values={k: names[k][v] if k in names else v for k, v in arrival.body().items()},
        )
        for arrival in arrivals
    ]


@pytest.fixture
def served_cluster(tmp_path, settings):
    cluster = SimCluster(parse_cluster(kueue.cluster_spec(1)), clock=WallClock(), speed=1.0)
    server = SimServer(cluster).start()  # ticks every 50 ms: the wall clock drives it
    settings.CLUSTER_MODE = "sim"
    settings.CLUSTER_KUBECONFIG = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    yield cluster
    server.stop()


@pytest.fixture
def loop_worker(settings, served_cluster):
    """The portal's Celery app consuming a queue of this test's own (nothing else in the
    broker is taken), with submissions asking for cycles as they commit."""
    settings.RECONCILE_ON_COMMIT = True
    # Kueue's scenario has no caps on waiting work; one member submits for every team here.
    settings.MAX_PENDING_JOBS_PER_USER = settings.MAX_PENDING_JOBS_PER_QUEUE = 100_000
    queue = f"replay-test-{uuid.uuid4().hex}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    app.amqp.queues.select_add(queue)
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, shutdown_timeout=20, queues=[queue]
        ):
            yield
    finally:
        worker_mirror_stop()
        app.conf.task_default_queue = before


def test_a_slice_of_kueues_benchmark_runs_every_job_once_within_quota(served_cluster, loop_worker):
    policy_apply(text=policy_yaml(kueue.policy(1)))
    owner = get_user_model().objects.get(username=kueue.MEMBER)
    arrivals = kueue.arrivals(1, SCALE)
    assert len(arrivals) == 600
    ticks: dict[int, list[kueue.Arrival]] = defaultdict(list)
    for arrival in arrivals:
        ticks[round(arrival.at * 10)].append(arrival)

    started = time.time() + 0.2
    start = datetime.fromtimestamp(started, UTC)
    for tick in sorted(ticks):
        time.sleep(max(0.0, started + tick / 10 - time.time()))
        job_submit_batch(requests=requests_of(ticks[tick], owner))
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline:
        # every job ended, and the cycle that saw them end also closed their pods' usage (it
        # moves the jobs first; on a slow machine the check could read in between)
        if (
            not Job.objects.exclude(state=JobState.SUCCEEDED).exists()
            and not UsageInterval.objects.filter(ended_at__isnull=True).exists()
        ):
            break
        time.sleep(0.5)

    result = kueue.outcome(start, 1)
    assert (result.jobs, result.succeeded) == (600, 600)
    assert result.problems == []
    completed = {}
    with served_cluster.lock:
        pods = list(served_cluster.store.items("pods"))
    for raw in pods:
        pod = pod_facts(raw)
        if pod.phase == "Succeeded":
            completed[pod.uid] = (pod.container.started_at, pod.container.finished_at)
    # Every job's last pod ran to its end (earlier ones were preempted and deleted).
    assert len(completed) == 600
    assert kueue.intervals_match_pods(completed) == []
