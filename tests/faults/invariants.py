""" "Nothing lost", checked: what the database says against what the cluster has."""

from __future__ import annotations

from collections import Counter

from queues.models import GPU_HOLDING_STATES, Job, JobState, Node, UsageInterval
from tests.sim import SimClusterHandle

JOB_LABEL = "gpuportal.io/job-id"


def cluster_jobs(sim: SimClusterHandle) -> Counter[int]:
    """How many Kubernetes Jobs the cluster has per portal job id."""
    items = sim.batch().list_job_for_all_namespaces(label_selector=JOB_LABEL).items
    return Counter(int(j.metadata.labels[JOB_LABEL]) for j in items)


def assert_nothing_lost(sim: SimClusterHandle) -> None:
    """Each job admitted at some point has exactly one Kubernetes Job (and a pending one none);
    each of the portal's pods that started has exactly one usage interval, whose start and end
    are the pod's own; no two jobs hold the same GPUs beyond a node's capacity."""
    per_job = cluster_jobs(sim)
    assert all(count == 1 for count in per_job.values()), per_job
    for job in Job.objects.all():
        if job.state == JobState.PENDING:
            assert job.pk not in per_job, f"pending job {job.pk} has a Kubernetes Job"
        elif job.admitted_at is not None and job.state != JobState.CANCELLED:
            assert per_job[job.pk] == 1, f"job {job.pk} ({job.state}) has {per_job[job.pk]} Jobs"
            assert job.k8s_job_name == f"gpuportal-job-{job.pk}"
    pods = [
        p
        for p in sim.core().list_pod_for_all_namespaces(label_selector=JOB_LABEL).items
        if p.status.container_statuses
    ]
    intervals = Counter(UsageInterval.objects.values_list("pod_uid", flat=True))
    assert all(count == 1 for count in intervals.values()), intervals
    for pod in pods:
        state = pod.status.container_statuses[0].state
        started = state.running or state.terminated
        if started is None:
            continue
        interval = UsageInterval.objects.get(pod_uid=pod.metadata.uid)
        assert interval.started_at == started.started_at, pod.metadata.name
        if state.terminated is not None:
            assert (interval.ended_at, interval.end_estimated) == (
                state.terminated.finished_at,
                False,
            ), pod.metadata.name


def assert_no_over_admission() -> None:
    """The whole GPUs that jobs holding GPUs were admitted onto fit each node's count."""
    used: Counter[str] = Counter()
    for job in Job.objects.filter(state__in=GPU_HOLDING_STATES, mig_profile=""):
        for node in job.nodes:
            used[node] += job.gpus_per_pod
    capacity = dict(Node.objects.values_list("name", "gpu_count"))
    replicas = dict(Node.objects.values_list("name", "time_slice_replicas"))
    over = {n: u for n, u in used.items() if u > capacity[n] * replicas[n]}
    assert not over, over
