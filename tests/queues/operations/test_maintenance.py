"""Draining nodes, seen through the simulated cluster's Kubernetes API and the real reconcile."""

from __future__ import annotations

from datetime import timedelta

import pytest
from auditlog.models import LogEntry
from kubernetes import client as k8s

from queues.catalog.selectors import capacity_by_state, free_gpu_equivalents
from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, JobState, Node, Queue, Team
from queues.operations.services import node_drain, node_return
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

T4 = ["t4-01", "t4-02", "t4-03", "t4-04"]


@pytest.fixture
def cluster(sim_cluster, example_policy, settings):
    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


@pytest.fixture
def cycle(sim_cluster, cluster):
    def run():
        return reconcile_cycle(cluster=cluster, now=sim_cluster.now())

    return run


def interactive_job(user, seconds=3600):
    return JobFactory(
        owner=user,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="interactive"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        env={"SIM_DURATION_SECONDS": str(seconds)},
    )


def test_a_drain_cordons_taints_and_labels_the_nodes_and_jobs_say_maintenance(
    client, ada, mia, sim_cluster, cycle
):
    cycle()
    client.force_login(ada)
    until = sim_cluster.now() + timedelta(days=1)

    form = {
        "gpu_class": "t4",
        "reason": "firmware update",
        "until": until.strftime("%Y-%m-%dT%H:%M"),
    }
    check = client.post("/manage/maintenance/", form)
    # The first step drains nothing: it shows what would be drained, then asks.
    assert check.status_code == 200
    assert not sim_cluster.core().read_node("t4-01").spec.unschedulable
    response = client.post(
        "/manage/maintenance/", {**form, "confirm": check.context["fingerprint"]}
    )

    assert response.status_code == 302
    core = sim_cluster.core()
    for name in T4:
        node = core.read_node(name)
        assert node.spec.unschedulable is True
        assert sorted((t.key, t.effect) for t in node.spec.taints) == [
            ("gpuportal.io/maintenance", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "NoSchedule"),
            ("nvidia.com/gpu", "NoSchedule"),  # the example's own taint stays
        ]
        assert node.metadata.labels["gpuportal.io/maintenance"] == "true"
        assert node.metadata.annotations["gpuportal.io/maintenance-reason"] == "firmware update"
    t4 = next(c for c in capacity_by_state() if c.gpu_class == "t4")
    assert (t4.in_service, t4.maintenance, t4.unhealthy) == (0, 16, 0)
    assert "t4" not in free_gpu_equivalents(sim_cluster.now())
    catalog = client.get("/queues/").content.decode()
    assert '<span class="chip maintenance">t4: 16 in maintenance</span>' in catalog
    entries = LogEntry.objects.filter(additional_data__action="drain").order_by("object_repr")
    assert [(e.object_repr, e.actor, e.additional_data["source"]) for e in entries] == [
        (name, ada, "page") for name in T4
    ]

    job = interactive_job(mia)
    cycle()
    sim_cluster.advance(5)
    cycle()

    job.refresh_from_db()
    assert job.state == JobState.PENDING
    binding = job.pending_reasons[0]
    back = until.strftime("%Y-%m-%d %H:%M UTC")
    assert (binding["code"], binding["message"], binding["hint"]) == (
        "Maintenance",
        f"4 of the 4 matching nodes are in maintenance (t4-01, t4-02, t4-03, t4-04: firmware "
        f"update, back {back}); "
        "they hold 64 free replicas",
        f"t4-01 is expected back at {back}",
    )
    pods = core.list_pod_for_all_namespaces().items
    assert [p.spec.node_name for p in pods if p.spec.node_name in T4] == []

    # A pod that asks for a T4 node directly is not scheduled there either.
    core.create_namespaced_pod(
        "default",
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="sneaky"),
            spec=k8s.V1PodSpec(
                node_selector={"kubernetes.io/hostname": "t4-01"},
                containers=[k8s.V1Container(name="c", image="busybox")],
            ),
        ),
    )
    sim_cluster.advance(5)
    assert core.read_namespaced_pod("sneaky", "default").spec.node_name is None

    for name in T4:
        response = client.post(f"/manage/maintenance/{name}/return")
        assert response.status_code == 302
    node = core.read_node("t4-01")
    assert not node.spec.unschedulable
    assert [(t.key, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert "gpuportal.io/maintenance" not in (node.metadata.labels or {})
    assert "gpuportal.io/maintenance-reason" not in (node.metadata.annotations or {})

    cycle()
    sim_cluster.advance(5)
    cycle()
    job.refresh_from_db()
    assert job.state in (JobState.ADMITTED, JobState.RUNNING)
    assert job.nodes[0] in T4
    assert Node.objects.filter(name__in=T4, maintenance="").count() == 4


def test_work_still_running_after_the_deadline_is_preempted_and_requeued(
    mia, sim_cluster, cluster, cycle
):
    cycle()
    job = interactive_job(mia, seconds=7200)
    cycle()
    sim_cluster.advance(10)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    node = Node.objects.get(name=job.nodes[0])

    node_drain(
        cluster=cluster,
        nodes=[node],
        reason="PSU swap",
        until=sim_cluster.now() + timedelta(hours=4),
        deadline=sim_cluster.now() + timedelta(minutes=10),
    )
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # before the deadline it may finish

    sim_cluster.advance(11 * 60)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTED
    event = job.events.filter(kind="preempted").get()
    assert event.message.startswith(f"node {node.name} is drained for maintenance (PSU swap)")
    for _ in range(5):
        sim_cluster.advance(30)
        cycle()
    job.refresh_from_db()
    assert job.state in (JobState.PENDING, JobState.ADMITTED, JobState.RUNNING)
    assert "requeued" in [e.kind for e in job.events.all()]
    assert node.name not in job.nodes

    node_return(cluster=cluster, nodes=[Node.objects.get(name=node.name)])
    cycle()
    assert Node.objects.get(name=node.name).maintenance == ""


def test_drain_input_is_checked_and_names_the_field(client, ada, cluster, cycle):
    cycle()
    client.force_login(ada)

    response = client.post("/manage/maintenance/", {"nodes": "t4-01 nope", "reason": "x"})
    assert response.status_code == 422
    assert response.context["form"].errors == {"nodes": ["unknown node(s): nope"]}

    response = client.post("/manage/maintenance/", {"nodes": "t4-01"})
    assert response.context["form"].errors == {"reason": ["This field is required."]}

    response = client.post("/manage/maintenance/", {"reason": "x"})
    assert response.context["form"].non_field_errors() == [
        "Name the nodes to drain: by name, rack or GPU class."
    ]
    response = client.post(
        "/manage/maintenance/", {"nodes": "t4-01", "reason": "x", "deadline": "2001-01-01T00:00"}
    )
    assert response.context["form"].errors == {"deadline": ["must be in the future"]}
    assert Node.objects.exclude(maintenance="").count() == 1  # h100-05, cordoned in the example


def test_a_drain_the_cluster_refuses_part_of_says_what_was_drained(client, ada, cluster, cycle):
    cycle()
    t4 = Node.objects.get(name="t4-01")
    Node.objects.create(name="t4-99", gpu_class=t4.gpu_class, product=t4.product, gpu_count=4)
    client.force_login(ada)

    form = {"nodes": "t4-01 t4-99", "reason": "x"}
    check = client.post("/manage/maintenance/", form)
    response = client.post(
        "/manage/maintenance/", {**form, "confirm": check.context["fingerprint"]}
    )

    assert response.status_code == 422
    (problem,) = response.context["problems"]
    assert problem.startswith("Drained t4-01; the cluster did not take the drain of t4-99: 404: ")
    assert Node.objects.get(name="t4-01").maintenance == "cordoned"
    assert Node.objects.get(name="t4-99").maintenance == ""


def running_h100_job(user, *, checkpoint_minutes_ago=None):
    job = JobFactory(
        owner=user,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        gpus_per_pod=8,
        runtime_limit=timedelta(hours=24),
        env={"SIM_DURATION_SECONDS": "inf"},
    )
    return job


def test_a_drain_shows_who_it_stops_and_what_they_lose_before_it_drains(
    client, ada, mia, sim_cluster, cycle
):
    from queues.models import Job

    job = running_h100_job(mia)
    cycle()
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    (node,) = job.nodes
    deadline = (sim_cluster.now() + timedelta(hours=2)).replace(second=0, microsecond=0)
    Job.objects.filter(pk=job.pk).update(
        started_at=deadline - timedelta(hours=3),
        last_checkpoint_at=deadline - timedelta(hours=2, minutes=20),
    )
    client.force_login(ada)
    form = {"nodes": node, "reason": "PSU swap", "deadline": deadline.strftime("%Y-%m-%dT%H:%M")}

    check = client.post("/manage/maintenance/", form)

    assert check.status_code == 200
    (drained,) = check.context["impact"]
    assert (drained.job.pk, drained.nodes, drained.stopped) == (job.pk, [node], True)
    assert drained.gpus == 8
    # At the deadline: 2h20m since its last checkpoint, on 8 GPUs.
    assert drained.lost_time == timedelta(hours=2, minutes=20)
    assert f"{drained.lost_gpu_hours_shown:.2f}" == "18.67"
    html = check.content.decode()
    assert "1 job runs there; 1 is stopped at the deadline." in html
    assert "2h20m × 8 = 18.67 GPU-hours" in html
    assert not sim_cluster.core().read_node(node).spec.unschedulable

    # Confirming something else than what was shown shows it again, and drains nothing.
    changed = client.post(
        "/manage/maintenance/",
        {**form, "reason": "other", "confirm": check.context["fingerprint"]},
    )
    assert changed.status_code == 200 and changed.context["impact"] is not None
    assert not sim_cluster.core().read_node(node).spec.unschedulable

    done = client.post("/manage/maintenance/", {**form, "confirm": check.context["fingerprint"]})
    assert done.status_code == 302
    assert sim_cluster.core().read_node(node).spec.unschedulable is True

    # Its owner is told on the job page, ahead of the deadline.
    client.force_login(mia)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"Node {node} is being drained for maintenance (PSU swap)." in page
    assert "This job will be stopped at" in page
    assert "Checkpoint before then." in page


def test_a_drain_without_a_deadline_stops_nobody_and_says_so(client, ada, cycle):
    cycle()
    client.force_login(ada)

    check = client.post("/manage/maintenance/", {"nodes": "t4-01", "reason": "x"})

    assert check.status_code == 200
    assert check.context["impact"] == []
    assert "No job runs on this node." in check.content.decode()
    assert "No deadline: running work may finish." in check.content.decode()
