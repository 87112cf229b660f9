"""The simulated cluster keeps per-node usage as pods bind and end, and retries a pending pod only
when a node it may go to changed; what it keeps must always equal what a full recomputation gives
(pods hold what is bound and not finished), whatever happened."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues.cluster.manifests import LaunchSpec, job_manifest
from simcluster import ManualClock, SimCluster, parse_cluster
from simcluster.quantity import parse_resources
from simcluster.scheduler import NodeInfo, schedule
from tests.simcluster.manifests import H100, gpu_job


def held_by_pods(cluster) -> dict[str, dict[str, int]]:
    usage: dict[str, dict[str, int]] = {}
    for run in cluster._runs.values():
        if run.node is None or run.finished_at is not None:
            continue
        held = usage.setdefault(run.node, {})
        for resource, amount in run.requests.items():
            held[resource] = held.get(resource, 0) + amount
    return usage


def nonzero(usage):
    return {n: {r: a for r, a in u.items() if a} for n, u in usage.items() if any(u.values())}


def test_usage_follows_binds_finishes_deletions_and_kills(sim_cluster):
    cluster = sim_cluster.cluster
    core, batch = sim_cluster.core(), sim_cluster.batch()
    core.create_namespace({"metadata": {"name": "team-a"}})
    for job_id, (node, seconds) in enumerate(
        [("a100-01", 60), ("a100-01", 600), ("a100-02", 600), ("h100-01", 30), ("h100-02", 6000)],
        start=1,
    ):
        spec = LaunchSpec(
            job_id=job_id,
            namespace="team-a",
            team="a",
            queue="q",
            image="x:1",
            command=["true"],
            args=[],
            env={},
            nodes=[node, node],
            devices_per_pod=2,
            extra_pod_annotations={"sim.gpuportal.io/duration-seconds": str(seconds)},
        )
        batch.create_namespaced_job("team-a", job_manifest(spec))
    sim_cluster.advance(5)
    assert nonzero(cluster._usage()) == nonzero(held_by_pods(cluster))

    sim_cluster.advance(100)  # jobs 1 and 4 finish
    batch.delete_namespaced_job("gpuportal-job-2", "team-a", propagation_policy="Background")
    pod = core.list_namespaced_pod("team-a", label_selector="gpuportal.io/job-id=3").items[0]
    sim_cluster.oom_kill("team-a", pod.metadata.name)
    sim_cluster.create_foreign_pod(gpus=1, node="h100-03")
    sim_cluster.advance(60)

    assert nonzero(cluster._usage()) == nonzero(held_by_pods(cluster))
    assert cluster._usage()["h100-02"]["nvidia.com/gpu"] == 4000  # job 5 still runs (milli-units)


# --- The scheduler's incremental view, against a recomputation ------------------------------------

NODES = [f"gpu-{i}" for i in range(4)]
SMALL_CLUSTER = {
    "simulation": {"default_duration_seconds": 600, "image_pull_seconds": 1},
    "node_groups": [
        {
            "name": "gpu",
            "labels": {"nvidia.com/gpu.product": H100},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "nodes": [{"name": name} for name in NODES],
        }
    ],
}

operations = st.lists(
    st.one_of(
        # A job of 1-3 pods of 1-4 GPUs, pinned to some nodes or free to go anywhere.
        st.tuples(
            st.just("create"),
            st.integers(1, 3),
            st.integers(1, 4),
            st.none() | st.lists(st.sampled_from(NODES), min_size=1, max_size=2, unique=True),
            st.sampled_from([30, 120, None]),
        ),
        st.tuples(st.just("delete"), st.integers(0, 30)),
        st.tuples(st.just("advance"), st.sampled_from([1, 10, 40, 130])),
        st.tuples(st.just("cordon"), st.sampled_from(NODES), st.booleans()),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_the_schedulers_view_matches_a_recomputation_whatever_happened(steps):
    cluster = SimCluster(
        parse_cluster(SMALL_CLUSTER), clock=ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    cluster.create_namespace({"metadata": {"name": "ns"}})
    names: list[str] = []
    for step in steps:
        if step[0] == "create":
            _, pods, gpus, pinned, duration = step
            name = f"job-{len(names)}"
            names.append(name)
            cluster.create_job(
                "ns",
                gpu_job(name, gpus=gpus, pods=pods, node_names=pinned, duration=duration, grace=5),
            )
        elif step[0] == "delete" and names:
            name = names[step[1] % len(names)]
            if cluster.store.get("jobs", "ns", name) is not None:
                cluster.delete_job("ns", name, propagation="Background")
        elif step[0] == "advance":
            cluster.advance(step[1])
        elif step[0] == "cordon":
            _, node, cordoned = step
            cluster.patch_node(
                node, {"spec": {"unschedulable": cordoned}}, "application/merge-patch+json"
            )

    # What each node holds, and what the scheduler reads of it, are what a full pass computes.
    held = held_by_pods(cluster)
    assert nonzero(cluster._usage()) == nonzero(held)
    for node in cluster.store.items("nodes"):
        info = cluster._node_infos[node["metadata"]["name"]]
        assert info.node is node
        assert info.allocatable == parse_resources(node["status"]["allocatable"])
    # No pod left pending would be placed by a scheduler that retried every pod from scratch.
    fresh = {
        node["metadata"]["name"]: NodeInfo(
            node,
            parse_resources(node["status"]["allocatable"]),
            held.get(node["metadata"]["name"], {}),
        )
        for node in cluster.store.items("nodes")
    }
    for uid in cluster._pending:
        run = cluster._runs[uid]
        pod = cluster.store.get("pods", run.namespace, run.name)
        assert schedule(pod, fresh).node is None
