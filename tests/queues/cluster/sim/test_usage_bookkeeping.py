"""The simulated cluster keeps per-node usage as pods bind and end; it must always equal what
its pods hold (bound, not finished), whatever happened."""

from __future__ import annotations

from queues.cluster.manifests import LaunchSpec, job_manifest


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
