"""/metrics: Prometheus text format, the series the monitoring stack needs with their labels,
counters kept in the database, and no answer without the bearer token."""

from __future__ import annotations

from collections import Counter

import pytest
from celery import shared_task
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from queues.cluster.adapter import Cluster
from queues.counters import counter_add
from queues.models import CapabilityClass, Job, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-tests"


@shared_task(name="tests.ops.always_fails")
def always_fails() -> None:
    raise ValueError("on purpose")


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


def scrape(token=TOKEN):
    with override_settings(METRICS_TOKEN=TOKEN):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
        return Client().get("/metrics", **headers)


def samples(response):
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def submit(user, **fields):
    return JobFactory(
        owner=user,
        team=Team.objects.get(name=fields.pop("team", "vision")),
        queue=Queue.objects.get(name=fields.pop("queue", "batch")),
        capability_class=CapabilityClass.objects.get(name=fields.pop("capability", "min-40gb")),
        env={"SIM_DURATION_SECONDS": "3600"},
        **fields,
    )


@pytest.mark.parametrize(
    ("configured", "header", "status"),
    [
        (TOKEN, "", 401),
        (TOKEN, "Bearer wrong", 401),
        (TOKEN, f"Token {TOKEN}", 401),
        ("", "Bearer ", 401),  # unset: nobody, not everybody
        (TOKEN, f"Bearer {TOKEN}", 200),
    ],
)
def test_it_refuses_callers_without_the_token(db, configured, header, status):
    with override_settings(METRICS_TOKEN=configured):
        response = Client().get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))

    assert response.status_code == status
    if status == 401:
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"gpuportal" not in response.content


def test_the_series_carry_the_clusters_state(sim_cluster, cluster, mia):
    running = submit(mia, gpus_per_pod=8)  # a whole a100 node (the cheapest ≥ 40 GB)
    # More than vision may ever hold at once: some of these wait, each on its binding reason.
    for _ in range(8):
        submit(mia, gpus_per_pod=8)
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(10)
    running.refresh_from_db()
    assert running.state == "running"

    response = scrape()

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response)
    assert found[("gpuportal_running_jobs", (("gpu_class", "a100-80gb"), ("team", "vision")))] == 1
    assert found[("gpuportal_gpus_held", (("gpu_class", "a100-80gb"), ("team", "vision")))] == 8
    # a100: 2 whole nodes of 8 (one held) and a MIG node of 52/7 GPU-equivalents in slices.
    assert (
        found[("gpuportal_capacity_gpus", (("gpu_class", "a100-80gb"), ("state", "in_use")))] == 8
    )
    assert found[("gpuportal_gang_slots", (("gpu_class", "a100-80gb"), ("gpus", "8")))] == 1
    assert (
        found[("gpuportal_capacity_gpus", (("gpu_class", "h100-80gb"), ("state", "maintenance")))]
        == 8
    )
    assert found[("gpuportal_capacity_gpus", (("gpu_class", "l4"), ("state", "unhealthy")))] == 4
    waiting = Counter(
        (job.queue.name, job.pending_reasons[0]["code"])
        for job in Job.objects.filter(state="pending")
    )
    assert sum(waiting.values()) >= 1
    assert {
        (dict(labels)["queue"], dict(labels)["reason"]): value
        for (name, labels), value in found.items()
        if name == "gpuportal_pending_jobs"
    } == waiting
    admitted = Job.objects.filter(admitted_at__isnull=False)
    assert admitted.count() >= 1
    assert found[("gpuportal_queue_wait_seconds_count", (("queue", "batch"),))] == admitted.count()
    assert found[("gpuportal_queue_wait_target_seconds", (("queue", "batch"),))] == 7200
    assert found[("gpuportal_reconcile_cycle_seconds_count", ())] == 3
    assert found[("gpuportal_reconcile_cycle_seconds_bucket", (("le", "+Inf"),))] == 3
    assert found[("gpuportal_cluster_reachable", ())] == 1
    assert ("gpuportal_reconcile_last_cycle_timestamp_seconds", ()) in found


def test_cluster_api_errors_and_reconcile_errors_are_counted(sim_cluster, cluster, mia):
    reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    sim_cluster.fail_requests(2, status=503, path="/api/v1/nodes")

    reconcile_cycle(cluster=cluster, now=sim_cluster.now())

    found = samples(scrape())
    assert found[("gpuportal_cluster_api_errors_total", (("kind", "http_503"),))] == 1
    assert found[("gpuportal_cluster_reachable", ())] == 0
    # A cycle that raises is counted by its exception.
    Job.objects.all().delete()
    with pytest.raises(ValidationError):
        reconcile_cycle(cluster=cluster, now="not a time")  # type: ignore[arg-type]
    found = samples(scrape())
    assert found[("gpuportal_reconcile_errors_total", (("kind", "ValidationError"),))] == 1


def test_celery_task_failures_are_counted_by_task(db):
    always_fails.apply()
    always_fails.apply()

    found = samples(scrape())

    assert (
        found[("gpuportal_celery_task_failures_total", (("task", "tests.ops.always_fails"),))] == 2
    )


def test_counters_add_up_rather_than_overwrite(db):
    # Each process adds with one conditional UPDATE on the shared row: two adders, one sum.
    counter_add("cluster_api_errors", "connection")
    counter_add("cluster_api_errors", "connection", 2)

    found = samples(scrape())

    assert found[("gpuportal_cluster_api_errors_total", (("kind", "connection"),))] == 3
