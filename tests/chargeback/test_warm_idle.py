"""Idle capacity kept warm by a floor, apart from other idle: the real reconcile against the
simulated cluster records which nodes a warm floor holds (``WarmHold``); chargeback's split
reads it, and the finance page, the CSV, the API and /ops/ show the same exact numbers."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from chargeback.capacity import capacity_split
from queues.cluster.adapter import Cluster
from queues.models import (
    CapabilityClass,
    JobState,
    NodePoolQueue,
    NodeProvisioning,
    Queue,
    Team,
    UsageInterval,
    WarmHold,
)
from queues.policy.apply import policy_apply
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory
from tests.queues.reconcile.test_elastic import CLUSTER, POLICY
from tests.sim import cluster_yaml

pytestmark = pytest.mark.django_db
D = Decimal


def start_elastic(sim_cluster_factory, start):
    policy_apply(text=POLICY)
    sim = sim_cluster_factory(nodes=cluster_yaml(CLUSTER), start=start)
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))

    def cycle():
        return reconcile_cycle(cluster=adapter, now=sim.now())

    return sim, cycle, adapter


@pytest.fixture
def elastic(sim_cluster_factory):
    # Started on the 10th of last month: the whole window lies in one month, before "now".
    last_month = (timezone.now().replace(day=1) - timedelta(days=1)).replace(day=10)
    start = last_month.replace(hour=8, minute=0, second=0, microsecond=0)
    sim, cycle, adapter = start_elastic(sim_cluster_factory, start)
    yield sim, cycle
    adapter.close()


@pytest.fixture
def warm_then_used(elastic):
    """interactive's floor (1 l4 node) holds l4-fixed (4 GPUs) empty for an hour; an
    interactive job of 30 minutes runs on it; then it is held again for 595 s."""
    sim, cycle = elastic
    t0 = sim.now()
    cycle()  # nodes seen; l4-fixed held for interactive from t0
    sim.advance(3600)
    t1 = sim.now()
    job = JobFactory(
        owner=get_user_model().objects.get(username="mia"),
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="interactive"),
        capability_class=CapabilityClass.objects.get(name="l4-only"),
        gpus_per_pod=4,
        state="pending",
        submitted_at=t1,
        env={"SIM_DURATION_SECONDS": "1800"},
        runtime_limit=timedelta(hours=1),
    )
    cycle()  # admitted onto the held node (the snapshot predates it: still held)
    sim.advance(5)
    cycle()  # the job holds the node: the floor is met by it, nothing held
    sim.advance(1800)
    cycle()  # the job ended at start + 1800 s: l4-fixed is held again
    sim.advance(595)
    job.refresh_from_db()
    return t0, t1, job, sim.now()


def test_a_floor_held_node_counts_warm_idle_and_the_rest_other_idle(warm_then_used):
    t0, t1, job, end = warm_then_used

    assert job.state == JobState.SUCCEEDED and job.nodes == ["l4-fixed"]
    [use] = UsageInterval.objects.filter(job=job)
    assert (use.started_at - t1, use.ended_at - use.started_at) == (
        timedelta(seconds=2),  # the image pull
        timedelta(seconds=1800),
    )
    holds = [
        (h.node.name, h.queue, h.started_at - t0, h.ended_at and h.ended_at - t0)
        for h in WarmHold.objects.order_by("started_at")
    ]
    assert holds == [
        ("l4-fixed", "interactive", timedelta(0), timedelta(seconds=3605)),
        ("l4-fixed", "interactive", timedelta(seconds=5405), None),
    ]
    assert not NodeProvisioning.objects.exists()  # the fixed node met the floor

    splits = {s.gpu_class: s for s in capacity_split(start=t0, end=end, now=end)}

    # l4: 4 GPUs × 6000 s = 6.667 GPU-hours; the job used 4 × 1800 s = 2. Held warm:
    # 4 × (3605 − 3 s the job already ran + 595) s = 4 × 4197 / 3600 = 4.663. Other idle:
    # 4 × 3 s between the job's end (t1 + 1802) and the cycle that held the node again = 0.003.
    l4 = splits["l4"]
    assert (l4.pool, l4.allocatable, l4.used, l4.warm_idle, l4.idle, l4.reserved_idle) == (
        "l4-pool",
        D("6.666"),  # the sum of the rounded parts
        D("2.000"),
        D("4.663"),
        D("0.003"),
        D("0.000"),
    )
    # h100: no floor, nothing ran: 8 × 6000 s = 13.333 other idle, none warm.
    h100 = splits["h100-80gb"]
    assert (h100.pool, h100.used, h100.warm_idle, h100.idle) == (
        "h100-burst",
        D("0.000"),
        D("0.000"),
        D("13.333"),
    )


def test_finance_sees_the_split_on_the_page_the_csv_the_api_and_ops(
    warm_then_used, fiona, ada, api_as
):
    t0, _, _, end = warm_then_used
    # The month as of the window's end: the node history begins at t0.
    params = {"period": f"{t0:%Y-%m}", "as_of": end.isoformat().replace("+00:00", "Z")}

    data = api_as(fiona).get("/api/chargeback/", params).json()
    l4 = next(c for c in data["idle_capacity"] if c["gpu_class"] == "l4")
    assert {k: l4[k] for k in ("pool", "used", "idle", "warm_idle", "allocatable")} == {
        "pool": "l4-pool",
        "used": "2.000",
        "idle": "0.003",
        "warm_idle": "4.663",
        "allocatable": "6.666",
    }

    exported = api_as(fiona).get("/api/chargeback/", {**params, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    [l4_row] = [r for r in rows if r["kind"] == "idle capacity" and r["capacity_gpu_class"] == "l4"]
    assert (
        l4_row["capacity_pool"],
        l4_row["capacity_idle"],
        l4_row["capacity_warm_idle"],
        l4_row["capacity_allocatable"],
    ) == ("l4-pool", "0.003", "4.663", "6.666")

    client = Client()
    client.force_login(fiona)
    page = client.get("/chargeback/", {"month": params["period"], "as_of": params["as_of"]})
    page = page.content.decode()
    assert (
        '<tr id="capacity-split-l4"><td>l4</td><td>l4-pool</td><td class="num">6.666</td>'
        '<td class="num">2.000</td><td class="num" data-part="idle">0.003</td>'
        '<td class="num" data-part="warm_idle">4.663</td>'
    ) in page

    # A member gets no idle capacity at all.
    mia = get_user_model().objects.get(username="mia")
    assert api_as(mia).get("/api/chargeback/", params).json()["idle_capacity"] is None


def test_ops_last_day_shows_the_hours_kept_warm(sim_cluster_factory, ada):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    sim, cycle, adapter = start_elastic(sim_cluster_factory, start)
    try:
        cycle()  # l4-fixed held for interactive
        sim.advance(3600)
        # the floor taken away (as a policy edit would; the file's quotas exceed this small
        # cluster, so the policy door would refuse the whole file)
        NodePoolQueue.objects.filter(queue__name="interactive").update(warm_nodes=0)
        cycle()  # no floor any more: the hold ends after exactly one hour
    finally:
        adapter.close()
    assert WarmHold.objects.filter(ended_at__isnull=True).count() == 0

    client = Client()
    client.force_login(ada)
    html = client.get("/ops/last-day").content.decode()

    # 4 GPUs held for one hour; what idles since then is other idle.
    assert '<tr id="capacity-split-l4"><td>l4</td><td>l4-pool</td>' in html
    row = html[html.index('<tr id="capacity-split-l4">') :]
    assert '<td class="num" data-part="warm_idle">4.000</td>' in row[: row.index("</tr>")]
