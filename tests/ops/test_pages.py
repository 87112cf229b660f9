"""/ops/ and /metrics end to end: the reconcile against the simulated cluster records the
history, the page and the exposition read it."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-tests"


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


def submit(user, *, queue="batch", capability="any-gpu", team="vision", **fields):
    return JobFactory(
        owner=user,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        env={"SIM_DURATION_SECONDS": "3600"},
        **fields,
    )


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_sees_the_dashboard(sim_cluster, cycle, mia, ada):
    submit(mia, gpus_per_pod=8, capability="min-40gb")
    cycle()
    sim_cluster.advance(30)
    cycle()

    response = client_for(ada).get("/ops/")

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="chart-capacity-now"' in html


@override_settings(METRICS_TOKEN=TOKEN)
def test_metrics_parse(sim_cluster, cycle, mia):
    submit(mia, gpus_per_pod=8, capability="min-40gb")
    cycle()
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    print(response.content.decode())
    assert "gpuportal_capacity_gpus" in families
