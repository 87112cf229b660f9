"""GPU duty cycle: the simulated cluster publishes DCGM utilization per pod behind a
Prometheus-compatible API; the portal reads it over HTTP and splits GPU-hours into busy and
allocated-but-idle."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from chargeback.selectors import waste_lines
from queues.cluster.adapter import Cluster
from queues.cluster.prometheus import Prometheus, PrometheusUnavailable, gpu_util_query
from queues.jobs.duty import duty_by, duty_lines
from queues.models import CapabilityClass, JobEvent, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.chargeback.helpers import hold
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
D = Decimal


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


def run_jobs(sim_cluster, cluster, jobs, seconds):
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(5)
    sim_cluster.advance(seconds)
    for _ in range(2):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(5)
    for job in jobs:
        job.refresh_from_db()


def submit(user, *, utilization, seconds, gpus=1, team="vision"):
    return JobFactory(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        gpus_per_pod=gpus,
        env={"SIM_DURATION_SECONDS": str(seconds), "SIM_GPU_UTILIZATION": utilization},
    )


def test_busy_and_idle_gpu_hours_follow_each_jobs_profile(sim_cluster, cluster, mia):
    # Two GPUs for one hour at 80 % the first half hour, 20 % the second: 2 GPU-h, of which
    # 2 × (0.5 × 0.8 + 0.5 × 0.2) = 1 busy and 1 idle. One GPU for an hour at 10 %: 0.1 busy,
    # 0.9 idle.
    first = submit(mia, utilization="0:80,1800:20", seconds=3600, gpus=2)
    second = submit(mia, utilization="10", seconds=3600, team="nlp")
    run_jobs(sim_cluster, cluster, [first, second], 3600)
    assert (first.state, second.state) == ("succeeded", "succeeded")
    start = first.started_at - timedelta(minutes=5)
    end = sim_cluster.now()

    lines = {
        line.job_id: line
        for line in duty_lines(Prometheus(f"{sim_cluster.url}/prometheus"), start=start, end=end)
    }

    assert (lines[first.pk].gpu_hours, lines[first.pk].busy_gpu_hours) == (D("2.000"), D("1.000"))
    assert lines[first.pk].idle_gpu_hours == D("1.000")
    assert (lines[second.pk].busy_gpu_hours, lines[second.pk].idle_gpu_hours) == (
        D("0.100"),
        D("0.900"),
    )
    teams = {s.name: s for s in duty_by(list(lines.values()), "team")}
    assert (teams["vision"].idle_gpu_hours, teams["nlp"].idle_gpu_hours) == (D("1.000"), D("0.900"))
    assert teams["nlp"].idle_share == D("90.0")


def test_the_endpoint_answers_as_prometheus_does(sim_cluster, cluster, mia):
    job = submit(mia, utilization="35", seconds=7200)
    run_jobs(sim_cluster, cluster, [job], 60)
    pod = f"gpuportal-job-{job.pk}"
    url = f"{sim_cluster.url}/prometheus/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL"

    with urllib.request.urlopen(url) as response:
        body = json.load(response)

    assert body["status"] == "success"
    assert body["data"]["resultType"] == "vector"
    [series] = [s for s in body["data"]["result"] if s["metric"]["pod"].startswith(pod)]
    assert series["metric"]["__name__"] == "DCGM_FI_DEV_GPU_UTIL"
    assert series["metric"]["namespace"] == "team-vision"
    assert float(series["value"][1]) == 35.0
    with pytest.raises(PrometheusUnavailable, match="HTTP 400: bad_data"):
        Prometheus(f"{sim_cluster.url}/prometheus").query("rate(foo[5m])", at=sim_cluster.now())
    assert gpu_util_query(window=timedelta(hours=1), namespaces=["a.b"], pods=["p"]) == (
        'avg by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace=~"a\\\\.b",'
        'pod=~"p"}[3600s]))'
    )


def test_the_panel_says_when_prometheus_is_not_configured_or_unreachable(example_policy, ada):
    hold(team="vision", gpu_class="h100-80gb", start=timezone.now() - timedelta(hours=1), end=None)
    client = Client()
    client.force_login(ada)

    with override_settings(PROMETHEUS_URL=""):
        off = client.get("/ops/last-day").content.decode()
    with override_settings(PROMETHEUS_URL="http://127.0.0.1:9", PROMETHEUS_TIMEOUT_SECONDS=1):
        down = client.get("/ops/last-day").content.decode()

    assert "Not configured: set PROMETHEUS_URL" in off
    assert "Prometheus could not be read: NewConnectionError" in down


def test_a_job_page_shows_its_own_duty_cycle(sim_cluster_factory, example_policy, mia):
    # The page measures up to the wall clock's now: the simulated hour lies in the past.
    sim_cluster = sim_cluster_factory(start=timezone.now() - timedelta(hours=3))
    cluster = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    job = submit(mia, utilization="25", seconds=3600)
    run_jobs(sim_cluster, cluster, [job], 3600)
    client = Client()
    client.force_login(mia)

    with override_settings(PROMETHEUS_URL=f"{sim_cluster.url}/prometheus"):
        html = client.get(f"/jobs/{job.pk}/").content.decode()

    # One GPU for an hour at 25 %.
    assert '<dd data-testid="duty-busy">0.250 GPU-h</dd>' in html
    assert '<dd data-testid="duty-idle">0.750 GPU-h</dd>' in html
    cluster.close()


def test_the_waste_counts_allocated_but_idle_hours_per_team_queue_and_class(
    sim_cluster, cluster, mia
):
    # Two GPUs for an hour at 80 % then 20 %: 1 of 2 GPU-hours idle (vision, batch). One GPU
    # for an hour at 10 %: 0.9 idle (nlp, batch).
    first = submit(mia, utilization="0:80,1800:20", seconds=3600, gpus=2)
    second = submit(mia, utilization="10", seconds=3600, team="nlp")
    run_jobs(sim_cluster, cluster, [first, second], 3600)
    start = first.started_at - timedelta(minutes=5)
    end = sim_cluster.now()
    # A pod Prometheus has no series for, preempted after 30 minutes: its loss counts, its idle
    # is not measured (never shown as 0); another with nothing lost is no line at all.
    speech = JobFactory(team=Team.objects.get(name="speech"), queue=Queue.objects.get(name="batch"))
    hold(team="speech", gpu_class="l4", job=speech, start=start, end=start + timedelta(minutes=30))
    JobEvent.objects.create(job=speech, at=start + timedelta(minutes=30), kind="preempted")
    hold(team="search", gpu_class="l4", start=start, end=start + timedelta(minutes=30))

    lines = waste_lines(
        start=start,
        end=end,
        now=end,
        team_ids=None,
        prometheus=Prometheus(f"{sim_cluster.url}/prometheus"),
    )

    assert [(w.team, w.queue, w.gpu_class, w.idle_gpu_hours) for w in lines] == [
        ("nlp", "batch", second.gpu_class.name, D("0.900")),
        ("speech", "batch", "l4", None),
        ("vision", "batch", first.gpu_class.name, D("1.000")),
    ]
    assert [w.lost_gpu_hours for w in lines] == [D(0), D("0.500"), D(0)]


def test_the_simulated_dcgm_exporter_serves_the_series_in_text_format(sim_cluster, cluster, mia):
    job = submit(mia, utilization="0:40,600:5", seconds=3600, gpus=2)
    for _ in range(3):
        reconcile_cycle(cluster=cluster, now=sim_cluster.now())
        sim_cluster.advance(5)
    job.refresh_from_db()

    with urllib.request.urlopen(f"{sim_cluster.url}/dcgm/metrics") as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()

    [family] = list(text_string_to_metric_families(text))
    [sample] = [s for s in family.samples if s.labels["namespace"] == "team-vision"]
    assert (family.name, family.type) == ("DCGM_FI_DEV_GPU_UTIL", "gauge")
    assert sample.labels["pod"].startswith(job.k8s_job_name) and sample.value == 40.0


def test_the_parts_shown_add_up_to_the_gpu_hours_shown():
    from fractions import Fraction

    from queues.jobs.duty import rounded_parts

    # 7 min 41 s on a 1/7 slice at 13.7 % busy: 0.0183 GPU-h, 0.0025 busy. Each part rounded
    # alone read 0.003 busy + 0.016 idle of 0.018 held.
    held = Fraction(461, 3600) / 7
    parts = rounded_parts(held, busy=held * Fraction(137, 1000), unmeasured=Fraction(0))

    assert parts == {
        "gpu_hours": D("0.018"),
        "busy_gpu_hours": D("0.003"),
        "idle_gpu_hours": D("0.015"),
        "unmeasured_gpu_hours": D("0.000"),
    }
