"""A waiting job starts on the nodes its reservation was planned on (issue 30): the reconcile
stores where each plan reserved a blocked job's start (``Job.planned_nodes``) and passes it to
the next plan, which starts the job there while they still fit, so the nodes the jobs behind it
were planned around stay its own."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from queues.cluster.adapter import Cluster
from queues.jobs.services import job_cancel, job_submit
from queues.models import Job, JobState
from queues.reconcile.cycle import reconcile_cycle
from tests.browser.test_member_day import SMALL_CLUSTER
from tests.queues.reconcile.test_one_answer import request

pytestmark = pytest.mark.django_db


def two_a100_nodes() -> dict:
    cluster = copy.deepcopy(SMALL_CLUSTER)
    cluster["node_groups"][0]["nodes"] = [{"name": "a100-1"}, {"name": "a100-2"}]
    return cluster


def test_a_blocked_job_is_admitted_on_its_planned_node(sim_cluster_factory, example_policy, mia):
    sim = sim_cluster_factory(nodes=two_a100_nodes())
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    try:
        first, second = (
            job_submit(request=request(mia, gpus=4, limit=timedelta(minutes=limit)))
            for limit in (30, 60)
        )
        for _ in range(3):
            reconcile_cycle(cluster=adapter, now=sim.now())
            sim.advance(10)
        first.refresh_from_db()
        second.refresh_from_db()
        assert (first.state, second.state) == (JobState.RUNNING, JobState.RUNNING)
        assert (first.nodes, second.nodes) == (["a100-1"], ["a100-2"])

        waiting = job_submit(request=request(mia, gpus=4, limit=timedelta(hours=1)))
        reconcile_cycle(cluster=adapter, now=sim.now())
        waiting.refresh_from_db()
        assert waiting.state == JobState.PENDING
        # reserved where the job with the shorter limit ends (30 min, not 60)
        gpu_class = waiting.planned_nodes["gpu_class"]
        assert waiting.planned_nodes == {"gpu_class": gpu_class, "nodes": list(first.nodes)}
        assert waiting.estimated_start == first.started_at + timedelta(minutes=30)

        # as an earlier plan would have left it: reserved on the other node
        other = "a100-2"
        Job.objects.filter(pk=waiting.pk).update(
            planned_nodes={"gpu_class": gpu_class, "nodes": [other]}
        )
        for job in (first, second):  # both nodes free: best fit alone would take a100-1
            job_cancel(job=job, by=mia)
        for _ in range(20):
            reconcile_cycle(cluster=adapter, now=sim.now())
            waiting.refresh_from_db()
            if waiting.state != JobState.PENDING:
                break
            sim.advance(10)
    finally:
        adapter.close()
    assert waiting.state in (JobState.ADMITTED, JobState.RUNNING)
    assert waiting.nodes == [other]
    assert waiting.planned_nodes == {}


def test_without_a_plan_best_fit_decides(sim_cluster_factory, example_policy, mia):
    """The same two free nodes, no planned nodes: the job goes where best fit puts it (ties by
    node name), so the test above shows the planned node, not a coincidence."""
    sim = sim_cluster_factory(nodes=two_a100_nodes())
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    try:
        job = job_submit(request=request(mia, gpus=4, limit=timedelta(hours=1)))
        reconcile_cycle(cluster=adapter, now=sim.now())
    finally:
        adapter.close()
    job.refresh_from_db()
    assert job.nodes == ["a100-1"]


@pytest.mark.parametrize(
    "stored",
    [[], "a100-1", {"nodes": "a100-1"}, {"gpu_class": 3, "nodes": ["a100-1"]}, {"nodes": [1]}],
)
def test_planned_nodes_edited_by_hand_plan_as_without(
    sim_cluster_factory, example_policy, mia, stored
):
    """The column is the reconcile's; a value it never writes (an admin's edit) is ignored, not
    a failed cycle: the job is admitted by best fit."""
    sim = sim_cluster_factory(nodes=two_a100_nodes())
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))
    try:
        job = job_submit(request=request(mia, gpus=4, limit=timedelta(hours=1)))
        Job.objects.filter(pk=job.pk).update(planned_nodes=stored)
        reconcile_cycle(cluster=adapter, now=sim.now())
    finally:
        adapter.close()
    job.refresh_from_db()
    assert (job.state, job.nodes) == (JobState.ADMITTED, ["a100-1"])
