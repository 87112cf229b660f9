"""/metrics' duty cycle, waste and node states: counters from zero on the first scrape, the duty
cycle counted from the simulated cluster's DCGM series through its Prometheus API, once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from portal.celery import app
from queues.cluster.adapter import Cluster
from queues.cluster.prometheus import Prometheus
from queues.jobs.duty import duty_count
from queues.jobs.tasks import duty_count_task
from queues.models import MaintenanceState, Node
from queues.reconcile.cycle import reconcile_cycle
from tests.chargeback.ops.test_duty import run_jobs, submit
from tests.chargeback.ops.test_metrics import samples, scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


def test_counters_are_exported_at_zero_from_the_first_scrape(example_policy):
    found = samples(scrape())

    key = (("gpu_class", "h100-80gb"), ("team", "vision"))
    assert found[("gpuportal_gpu_allocated_seconds_total", key)] == 0
    assert found[("gpuportal_gpu_busy_seconds_total", key)] == 0
    assert found[("gpuportal_reconcile_errors_total", (("kind", "DatabaseError"),))] == 0
    assert found[("gpuportal_cluster_api_errors_total", (("kind", "connection"),))] == 0
    assert found[("gpuportal_celery_task_failures_total", (("task", "queues.reconcile"),))] == 0
    assert found[("gpuportal_celery_task_failures_total", (("task", "queues.duty_count"),))] == 0
    lost = (("gpu_class", "l4"), ("kind", "reserved_idle"))
    assert found[("gpuportal_gpu_hours_lost", lost)] == 0


def test_node_states_by_class(sim_cluster, cluster):
    # examples/cluster.yaml: h100-01..05, h100-05 cordoned. Drain h100-01, h100-02 goes bad.
    reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    Node.objects.filter(name="h100-01").update(maintenance=MaintenanceState.DRAINING)
    Node.objects.filter(name="h100-02").update(healthy=False)

    found = samples(scrape())

    def nodes(state):
        return found[("gpuportal_nodes", (("gpu_class", "h100-80gb"), ("state", state)))]

    assert (nodes("in_service"), nodes("cordoned"), nodes("draining"), nodes("unhealthy")) == (
        2,
        1,
        1,
        1,
    )


def test_the_duty_cycle_is_counted_once_by_class_and_team(sim_cluster, cluster, mia):
    # One vision pod on 2 GPUs for an hour at 25 %: 7200 GPU-seconds held, 1800 busy.
    job = submit(mia, utilization="25", seconds=3600, gpus=2)
    start = sim_cluster.now()
    prometheus = Prometheus(f"{sim_cluster.url}/prometheus")
    duty_count(prometheus, now=start)  # the first count: starts the span
    run_jobs(sim_cluster, cluster, [job], 3600)
    end = sim_cluster.now() + timedelta(minutes=1)

    assert duty_count(prometheus, now=end) == end - start
    assert duty_count(prometheus, now=end) == timedelta(0)  # twice: counted once

    found = samples(scrape())
    key = (("gpu_class", job.gpu_class.name), ("team", "vision"))
    assert found[("gpuportal_gpu_allocated_seconds_total", key)] == pytest.approx(7200, abs=4)
    assert found[("gpuportal_gpu_busy_seconds_total", key)] == pytest.approx(1800, abs=4)


def test_beat_counts_the_duty_cycle_with_a_registered_task(settings, sim_cluster, example_policy):
    app.loader.import_default_modules()
    assert all(entry["task"] in app.tasks for entry in settings.CELERY_BEAT_SCHEDULE.values())
    assert settings.CELERY_BEAT_SCHEDULE["duty-count"]["task"] == "queues.duty_count"

    settings.PROMETHEUS_URL = ""
    assert duty_count_task() == "PROMETHEUS_URL is not set"
    settings.PROMETHEUS_URL = f"{sim_cluster.url}/prometheus"
    assert duty_count_task() == "counted 300 s"  # the first count looks 5 minutes back
