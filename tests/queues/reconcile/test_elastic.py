"""Elastic capacity end to end: the real reconcile against the simulated cluster over HTTP, whose
provisioner answers the portal's ProvisioningRequests with nodes after a lead time (seeded, on
a manual clock), fails some, and removes nodes the portal asks to go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from queues.cluster.adapter import Cluster
from queues.models import (
    CapabilityClass,
    Job,
    JobState,
    NodePool,
    NodeProvisioning,
    PoolNode,
    ProvisioningState,
    Queue,
    Team,
)
from queues.policy.apply import policy_apply
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.elastic import lead_times
from tests.factories import JobFactory
from tests.sim import cluster_yaml

pytestmark = pytest.mark.django_db

POLICY = """
gpu_classes:
  - {name: h100-80gb, product: NVIDIA-H100-80GB-HBM3, hbm_gb: 80, precisions: [bf16, fp16], tier: 4}
  - {name: l4, product: NVIDIA-L4, hbm_gb: 24, precisions: [fp16, int8], tier: 2}
capability_classes:
  - {name: any-gpu}
  - {name: h100, min_hbm_gb: 80}
  - {name: l4-only, precisions: [int8]}
teams:
  - name: vision
    namespace: team-vision
    cost_center: CC-1001
    members: [mia]
    quotas:
      h100-80gb: {nominal: 32, borrowing_limit: 0}
      l4: {nominal: 16, borrowing_limit: 0}
queues:
  - name: interactive
    expected_wait_target: 5m
    max_runtime: 4h
    default_runtime: 1h
    priority: 100
    preemption_class: never
    sharing_mode: exclusive
    allowed_gpu_classes: [l4]
    allowed_capability_classes: [l4-only]
    max_gpus_per_job: 4
    teams: [vision]
  - name: batch
    expected_wait_target: 2h
    max_runtime: 1d
    default_runtime: 4h
    priority: 10
    preemption_class: never
    sharing_mode: exclusive
    allowed_gpu_classes: [h100-80gb, l4]
    allowed_capability_classes: [h100, l4-only]
    max_gpus_per_job: 8
    teams: [vision]
node_pools:
  - name: h100-burst
    gpu_class: h100-80gb
    max_nodes: 2
    node: {gpus: 8, labels: {rack: rack-5, network_domain: ib-a}}
    lead_time: {median: 6m, p90: 9m}
    scale_down_delay: 10m
    queues:
      batch: {may_scale_up: true}
  - name: l4-pool
    gpu_class: l4
    max_nodes: 3
    node: {gpus: 4}
    lead_time: {median: 4m, p90: 7m}
    scale_down_delay: 10m
    queues:
      interactive: {warm_nodes: 1}
      batch: {may_scale_up: true}
"""

CLUSTER = """
simulation: {default_duration_seconds: 3600, image_pull_seconds: 2}
node_groups:
  - name: h100
    labels:
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/gpu.count: "8"
      topology.kubernetes.io/rack: rack-1
      network.gpuportal.io/domain: ib-a
    allocatable: {nvidia.com/gpu: "8", cpu: "96", memory: 1000Gi}
    nodes: [{name: h100-01}]
  - name: l4
    labels:
      nvidia.com/gpu.product: NVIDIA-L4
      nvidia.com/gpu.count: "4"
    allocatable: {nvidia.com/gpu: "4", cpu: "46", memory: 180Gi}
    nodes: [{name: l4-fixed}]
node_pools:
  - name: h100-burst
    template: h100
    labels: {topology.kubernetes.io/rack: rack-5}
    lead_seconds: {median: 360, p90: 540}
  - name: l4-pool
    template: l4
    lead_seconds: {median: 240, p90: 420}
"""


@pytest.fixture
def elastic(sim_cluster_factory):
    policy_apply(text=POLICY)
    sim = sim_cluster_factory(nodes=cluster_yaml(CLUSTER))
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    yield sim, adapter
    adapter.close()


def cycle(elastic):
    sim, adapter = elastic
    return reconcile_cycle(cluster=adapter, now=sim.now())


def submit(*, queue="batch", capability="h100", gpus=8, seconds=3 * 3600):
    return JobFactory(
        owner=get_user_model().objects.get(username="mia"),
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        gpus_per_pod=gpus,
        runtime_limit=timedelta(hours=4),
        env={"SIM_DURATION_SECONDS": str(seconds)},
    )


def state(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def run_until(elastic, done, *, step=30, limit=3600):
    sim, _ = elastic
    for _ in range(limit // step):
        if done():
            return
        sim.advance(step)
        cycle(elastic)
    raise AssertionError("not reached in time")


def test_a_scale_up_serves_a_waiting_8_gpu_job_within_the_lead_times_p90(elastic):
    sim, _ = elastic
    first = submit()
    cycle(elastic)
    sim.advance(5)
    cycle(elastic)
    assert state(first) == JobState.RUNNING
    asked_at = sim.now()
    second = submit()
    cycle(elastic)

    second.refresh_from_db()
    assert second.state == JobState.PENDING
    binding = second.pending_reasons[0]
    assert binding["code"] == "Provisioning"
    assert binding["message"] == (
        "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
        "ready in about 6 min (p90 9 min)"
    )
    estimate = second.estimated_start
    assert estimate == asked_at + timedelta(minutes=9)
    assert second.likely_start == asked_at + timedelta(minutes=6)
    [asked] = NodeProvisioning.objects.all()
    assert (asked.pool.name, asked.nodes, asked.for_jobs) == ("h100-burst", 1, [second.pk])
    # the request is in the cluster, as a ProvisioningRequest the provisioner watches
    objects = sim.cluster.store.items("provisioningrequests")
    assert [o["metadata"]["name"] for o in objects] == [asked.object_name]
    assert objects[0]["spec"]["parameters"]["nodePool"] == "h100-burst"
    # the next cycles ask for nothing more: the node being provisioned is counted
    sim.advance(30)
    cycle(elastic)
    assert NodeProvisioning.objects.count() == 1

    run_until(elastic, lambda: state(second) == JobState.RUNNING)
    second.refresh_from_db()
    [arrived] = PoolNode.objects.all()
    assert arrived.requested_at == asked.requested_at
    assert second.nodes == [arrived.name]
    assert arrived.ready_at <= estimate  # the node came within the p90 the estimate said
    assert second.started_at <= estimate + timedelta(seconds=60)  # within a cycle and a pull
    asked.refresh_from_db()
    assert asked.state == ProvisioningState.PROVISIONED
    assert asked.nodes_ready == [arrived.name]


def test_a_pool_at_its_maximum_gives_the_old_reasons(elastic):
    jobs = [submit() for _ in range(3)]
    cycle(elastic)
    # one runs, two wait: each gets a node asked for (the pool's maximum is 2)
    assert NodeProvisioning.objects.get().nodes == 2
    run_until(elastic, lambda: all(state(j) == JobState.RUNNING for j in jobs))
    fourth = submit()
    cycle(elastic)
    fourth.refresh_from_db()
    codes = [r["code"] for r in fourth.pending_reasons]
    assert codes[0] == "InsufficientCapacity"
    assert "Provisioning" not in codes
    assert NodeProvisioning.objects.count() == 1


def test_a_warm_floor_keeps_interactive_fast_while_batch_waits_for_a_scale_up(elastic):
    sim, _ = elastic
    cycle(elastic)
    # the floor wants one empty l4 node for interactive: the fixed one is held for it
    batch = submit(capability="l4-only", gpus=4)
    cycle(elastic)
    batch.refresh_from_db()
    assert batch.state == JobState.PENDING
    assert batch.pending_reasons[0]["code"] == "Provisioning"
    assert batch.pending_reasons[0]["message"] == (
        "needs 4 l4 GPUs; a node is being provisioned for it, ready in about 4 min (p90 7 min)"
    )
    # an interactive job arriving now starts at once on the warm node
    interactive = submit(queue="interactive", capability="l4-only", gpus=4, seconds=600)
    submitted = sim.now()
    cycle(elastic)
    sim.advance(5)
    cycle(elastic)
    interactive.refresh_from_db()
    assert interactive.state == JobState.RUNNING
    assert interactive.nodes == ["l4-fixed"]
    assert interactive.started_at - submitted <= timedelta(seconds=10)
    # interactive now runs on its floor's node, which counts toward the floor: nothing more is
    # held or asked for; batch's node is the only one asked for
    asks = [(a.nodes, a.warm, a.for_jobs) for a in NodeProvisioning.objects.all()]
    assert asks == [(1, 0, [batch.pk])]
    run_until(elastic, lambda: state(batch) == JobState.RUNNING)
    batch.refresh_from_db()
    assert batch.nodes[0].startswith("l4-pool-")


def test_scale_down_never_removes_a_node_under_the_floor_or_with_a_job(elastic):
    sim, _ = elastic
    # interactive's floor is 2 l4 nodes: the fixed one, and one the pool adds
    policy_apply(
        text=POLICY.replace("interactive: {warm_nodes: 1}", "interactive: {warm_nodes: 2}")
    )
    jobs = [submit(capability="l4-only", gpus=4, seconds=1200) for _ in range(2)]
    cycle(elastic)
    assert [(a.nodes, a.warm) for a in NodeProvisioning.objects.all()] == [(3, 1)]
    run_until(elastic, lambda: all(state(j) == JobState.RUNNING for j in jobs))
    run_until(elastic, lambda: PoolNode.objects.count() == 3)
    busy = {n for j in jobs for n in Job.objects.get(pk=j.pk).nodes}
    [warm] = set(PoolNode.objects.values_list("name", flat=True)) - busy
    # 15 min: the warm node sits empty longer than the 10 min delay, the others run jobs
    sim.advance(15 * 60)
    cycle(elastic)
    assert not PoolNode.objects.filter(removal_requested_at__isnull=False).exists()
    run_until(elastic, lambda: all(state(j) == JobState.SUCCEEDED for j in jobs))
    # empty for the delay: the two that ran the jobs go, the floor's node stays
    sim.advance(11 * 60)
    cycle(elastic)
    sim.advance(5)
    cycle(elastic)
    removed = set(PoolNode.objects.filter(removed_at__isnull=False).values_list("name", flat=True))
    assert removed == busy
    assert sim.cluster.store.get("nodes", "", warm) is not None
    assert all(sim.cluster.store.get("nodes", "", n) is None for n in removed)
    # a removed node leaves the engine's view (the mirror keeps it, as not reported)
    sim.advance(30)
    cycle(elastic)
    assert not NodeProvisioning.objects.filter(state=ProvisioningState.PROVISIONING).exists()
    # warm idle GPU-hours were counted on the node held empty
    warm_row = PoolNode.objects.get(name=warm)
    assert warm_row.idle_seconds >= 15 * 60


def test_a_failed_provisioning_is_retried_and_shown(elastic):
    sim, _ = elastic
    first = submit()
    cycle(elastic)
    sim.advance(5)
    cycle(elastic)
    sim.cluster.fail_provisioning(1)
    second = submit()
    cycle(elastic)
    [asked] = NodeProvisioning.objects.all()
    run_until(elastic, lambda: NodeProvisioning.objects.count() == 2)
    asked.refresh_from_db()
    assert asked.state == ProvisioningState.FAILED
    assert asked.failure == (
        "node h100-burst-new did not become Ready: GPU driver initialization timed out (simulated)"
    )
    retry = NodeProvisioning.objects.exclude(pk=asked.pk).get()
    assert (retry.attempt, retry.retry_of_id, retry.nodes) == (2, asked.pk, 1)
    assert retry.for_jobs == [second.pk]
    run_until(elastic, lambda: state(second) == JobState.RUNNING)
    assert state(first) == JobState.RUNNING


def test_lead_times_are_learned_from_the_nodes_that_came(elastic):
    pool = NodePool.objects.get(name="h100-burst")
    assert lead_times(pool) == (timedelta(minutes=6), timedelta(minutes=9), 0)
    base = timezone.now()
    for index, minutes in enumerate([4, 5, 6, 7, 8, 12]):
        PoolNode.objects.create(
            pool=pool,
            name=f"seen-{index}",
            requested_at=base,
            ready_at=base + timedelta(minutes=minutes),
        )
    assert lead_times(pool) == (timedelta(minutes=6), timedelta(minutes=12), 6)


def test_the_demo_pool_scales_up_under_the_load_generator_and_back_down(
    sim_cluster, example_policy
):
    import random

    from queues.management.commands.demo_load import demo_load_step
    from tests.conftest import ROOT

    policy_apply(text=(ROOT / "examples" / "policy-elastic.yaml").read_text())
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    rng = random.Random(7)

    def cycle() -> None:
        reconcile_cycle(cluster=adapter, now=sim_cluster.now())

    try:
        for _ in range(40):  # 20 minutes of load, a round every 30 s
            demo_load_step(rng=rng)
            cycle()
            sim_cluster.advance(30)
            if PoolNode.objects.filter(removed_at__isnull=True).count() == 2:
                break
        assert PoolNode.objects.count() >= 1
        came = list(PoolNode.objects.all())
        assert all(n.name.startswith("h100-burst-") for n in came)
        # some job ran on a node the pool added
        on_pool = [
            j
            for j in Job.objects.exclude(nodes=[])
            if any(n.startswith("h100-burst-") for n in j.nodes)
        ]
        assert on_pool
        # the load stops: once the jobs are done and the nodes sat empty for 5 min, they go
        for _ in range(80):
            cycle()
            sim_cluster.advance(30)
            if not PoolNode.objects.filter(removed_at__isnull=True).exists():
                break
        assert not PoolNode.objects.filter(removed_at__isnull=True).exists()
        assert sim_cluster.cluster.store.items("nodes") == [
            n
            for n in sim_cluster.cluster.store.items("nodes")
            if not n["metadata"]["name"].startswith("h100-burst-")
        ]
    finally:
        adapter.close()


def test_people_see_the_scale_up_on_the_job_page_the_catalog_and_ops(elastic, client):
    sim, _ = elastic
    first = submit()
    cycle(elastic)
    sim.advance(5)
    cycle(elastic)
    second = submit()
    cycle(elastic)
    mia = get_user_model().objects.get(username="mia")
    client.force_login(mia)

    page = client.get(f"/jobs/{second.pk}/").content.decode()
    assert "Waiting for a new node, ready in about" in page
    assert "needs 8 h100-80gb GPUs; a node is being provisioned for it" in page

    catalog = client.get("/queues/").content.decode()
    assert 'data-testid="node-pools"' in catalog
    row = catalog.split('data-pool="h100-burst"')[1].split("</tr>")[0]
    # one ready? none yet: the fixed h100-01 is not the pool's; one provisioning, one more possible
    assert '<td data-label="Nodes ready">0</td>' in row
    assert '<td data-label="Provisioning">1</td>' in row
    assert '<td data-label="Possible">1 more</td>' in row
    assert "about 6m (p90 9m)" in row
    assert "interactive: 1 node kept warm" in catalog

    run_until(elastic, lambda: state(second) == JobState.RUNNING)
    assert state(first) == JobState.RUNNING
    admin = get_user_model().objects.create_user("ada", is_staff=True, is_superuser=True)
    client.force_login(admin)
    ops = client.get("/ops/").content.decode()
    section = ops.split('data-testid="ops-node-pools"')[1].split("</section>")[0]
    burst = section.split('data-pool="h100-burst"')[1].split("</tr>")[0]
    arrived = PoolNode.objects.get()
    lead = arrived.ready_at - arrived.requested_at
    assert '<td data-label="Nodes came" class="num">1</td>' in burst
    assert '<td data-label="Jobs that waited" class="num">1</td>' in burst
    assert '<td data-label="Requests (failed)" class="num">1 (0)' in burst
    from portal.formatting import format_duration

    assert f"{format_duration(lead)}, {format_duration(lead)}" in burst
    # the expected lead time says where it comes from; a pool's days are its own rows, labelled
    assert "<small>learned from the last 1 node</small>" in burst or (
        "<small>as the policy says (no history yet)</small>" in burst
    )
    assert '<td data-label="Day"><small>of which on ' in section


_NOW = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)


def test_the_job_page_says_a_node_due_within_a_minute_plainly() -> None:
    # the job page's summary line (no database needed)
    ready = _NOW + timedelta(seconds=20)
    job = Job(
        state="pending",
        pending_reasons=[
            {
                "code": "Provisioning",
                "details": {
                    "ready_at": ready.isoformat(),
                    "ready_by": (ready + timedelta(minutes=1)).isoformat(),
                },
            }
        ],
    )
    assert job.new_node_text(_NOW) == "waiting for a new node, ready in under a minute (p90 1 min)"
