"""Small builders for hand-made snapshots: tests, the benchmark and demo data use them.

Every builder takes keyword arguments with sensible defaults so a test names only what matters:
``snapshot(nodes=[node("n1", gpus=4)], teams=[team("vision", {"h100-80gb": 8})], ...)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from queues.admission.capability import CapabilityRequest, GpuClassSpec
from queues.admission.engine import plan
from queues.admission.snapshot import (
    CapacityKind,
    GpuClass,
    JobId,
    Node,
    PendingJob,
    PreemptionClass,
    Queue,
    Quota,
    Reservation,
    RunningJob,
    SharingMode,
    Snapshot,
    Team,
    TopologyScope,
)

NOW = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)

ALL = frozenset({"fp64", "tf32", "bf16", "fp16", "int8"})
MIG_A100 = {"1g.5gb": Fraction(1, 7), "2g.10gb": Fraction(2, 7), "3g.20gb": Fraction(3, 7)}
MIG_H100 = {"1g.10gb": Fraction(1, 7), "2g.20gb": Fraction(2, 7), "3g.40gb": Fraction(3, 7)}

GPU_CLASSES = (
    GpuClass(GpuClassSpec("t4-16gb", 16, frozenset({"fp16", "int8"}), tier=1), Fraction(1, 2)),
    GpuClass(
        GpuClassSpec("l4-24gb", 24, frozenset({"fp16", "bf16", "fp8", "int8"}), tier=2), Fraction(1)
    ),
    GpuClass(GpuClassSpec("a100-40gb", 40, ALL, MIG_A100, rdma=True, tier=3), Fraction(2)),
    GpuClass(
        GpuClassSpec("h100-80gb", 80, ALL | {"fp8"}, MIG_H100, rdma=True, tier=4), Fraction(4)
    ),
)

CAPABILITIES = (
    CapabilityRequest("any-gpu"),
    CapabilityRequest("any-40gb", min_hbm_gb=40),
    CapabilityRequest("h100", min_hbm_gb=80, precisions=frozenset({"fp8"})),
    CapabilityRequest("a100", min_hbm_gb=40, min_tier=3),
    CapabilityRequest("mig-1g", mig_profile="1g.10gb"),
    CapabilityRequest("mig-3g", mig_profile="3g.40gb"),
    CapabilityRequest("small-inference", min_hbm_gb=16, precisions=frozenset({"int8"})),
)


def node(name: str, gpu_class: str = "h100-80gb", gpus: int = 8, **fields: Any) -> Node:
    fields.setdefault("rack", "r1")
    fields.setdefault("network_domain", "d1")
    return Node(name=name, gpu_class=gpu_class, gpus=gpus, **fields)


def queue(name: str, **fields: Any) -> Queue:
    """A queue; ``preemption`` and ``sharing`` accept their string values."""
    for field_name, kind in (
        ("preemption", PreemptionClass),
        ("sharing", SharingMode),
        ("required_topology", TopologyScope),
    ):
        if isinstance(fields.get(field_name), str):
            fields[field_name] = kind(fields[field_name])
    if "preemption" in fields and fields["preemption"] is not PreemptionClass.NEVER:
        fields.setdefault("checkpoint_interval", timedelta(minutes=30))
    return Queue(name=name, **fields)


STANDARD_QUEUES = (
    queue(
        "interactive",
        priority=30,
        max_runtime=timedelta(hours=4),
        default_runtime=timedelta(hours=2),
    ),
    queue("training", priority=20, default_runtime=timedelta(hours=8)),
    queue(
        "batch",
        priority=10,
        preemption="graceful",
        grace_period=timedelta(minutes=5),
        may_borrow=True,
        default_runtime=timedelta(hours=6),
    ),
    queue("inference", priority=40, reservation_only=True, default_runtime=timedelta(hours=24)),
)


def team(
    name: str,
    quotas: Mapping[str, int | Fraction | tuple[int | Fraction, int | Fraction]] | None = None,
    weight: int | Fraction = 1,
    usage: int | Fraction = 0,
) -> Team:
    """A team; each quota is ``nominal`` or ``(nominal, borrowing_limit)``."""
    built = []
    for gpu_class, value in sorted((quotas or {}).items()):
        nominal, limit = value if isinstance(value, tuple) else (value, 0)
        built.append(Quota(gpu_class, Fraction(nominal), Fraction(limit)))
    return Team(
        name=name, weight=Fraction(weight), quotas=tuple(built), recent_usage=Fraction(usage)
    )


def reservation(
    id: int,
    team: str,
    amount: int | Fraction,
    gpu_class: str = "h100-80gb",
    **fields: Any,
) -> Reservation:
    return Reservation(id=id, team=team, gpu_class=gpu_class, amount=Fraction(amount), **fields)


def running(
    id: int,
    team: str,
    nodes: str | Iterable[str],
    gpus: int | Fraction = 1,
    *,
    queue: str = "training",
    user: str = "ann",
    gpu_class: str = "h100-80gb",
    started: timedelta | None = timedelta(hours=1),
    runtime: timedelta = timedelta(hours=4),
    kind: CapacityKind | str = CapacityKind.NOMINAL,
    **fields: Any,
) -> RunningJob:
    """A running job with one pod per entry of ``nodes``, each holding ``gpus`` GPU-eq;
    ``started`` is how long ago it started (None: admitted, not started)."""
    pods = (nodes,) if isinstance(nodes, str) else tuple(nodes)
    return RunningJob(
        id=id,
        team=team,
        user=user,
        queue=queue,
        gpu_class=gpu_class,
        pods=pods,
        gpu_eq_per_pod=Fraction(gpus),
        runtime_limit=runtime,
        started_at=None if started is None else NOW - started,
        capacity=CapacityKind(kind),
        **fields,
    )


def pending(
    id: int,
    team: str,
    queue: str = "training",
    capability: str = "any-gpu",
    *,
    gpus: int = 1,
    pods: int = 1,
    user: str = "ann",
    waited: timedelta = timedelta(minutes=10),
    **fields: Any,
) -> PendingJob:
    """A pending job submitted ``waited`` ago (ties in submit time break on id)."""
    return PendingJob(
        id=id,
        queue=queue,
        team=team,
        user=user,
        capability=capability,
        submitted_at=NOW - waited,
        pods=pods,
        gpus_per_pod=gpus,
        **fields,
    )


def snapshot(**parts: Any) -> Snapshot:
    """A snapshot at ``NOW`` with the standard GPU classes, capability classes and queues unless
    given."""
    parts.setdefault("now", NOW)
    parts.setdefault("gpu_classes", GPU_CLASSES)
    parts.setdefault("capability_classes", CAPABILITIES)
    parts.setdefault("queues", STANDARD_QUEUES)
    for name in (
        "nodes",
        "queues",
        "teams",
        "reservations",
        "running",
        "pending",
        "gpu_classes",
        "capability_classes",
        "probes",
    ):
        if name in parts:
            parts[name] = tuple(parts[name])
    parts.setdefault("nodes", ())
    parts.setdefault("teams", ())
    return Snapshot(**parts)


def play(start: Snapshot, runs: Mapping[JobId, timedelta] | None = None) -> dict[JobId, datetime]:
    """When each pending job of ``start`` really starts if the engine plans at every moment a job
    ends, nothing new arrives, and job ``id`` runs ``runs[id]`` (default: its runtime limit; a
    running job counts from its start). Admitted jobs start at once. For checking the forecast
    against the policy it predicts: it refuses plans that preempt (the forecast does not foresee
    preemptions)."""
    runs = runs or {}
    queues = {q.name: q for q in start.queues}
    running = list(start.running)
    waiting = {job.id: job for job in start.pending}
    ends = {
        job.id: (job.started_at or start.now) + runs.get(job.id, job.runtime_limit)
        for job in running
    }
    started: dict[JobId, datetime] = {}
    now = start.now
    while waiting:
        snapshot = replace(
            start, now=now, running=tuple(running), pending=tuple(waiting.values()), probes=()
        )
        result = plan(snapshot)
        if result.preemptions:
            raise ValueError("play() models no preemption")
        for admission in result.admissions:
            job = waiting.pop(admission.job_id)
            limit = job.runtime_limit or queues[job.queue].default_runtime
            started[job.id] = now
            ends[job.id] = now + runs.get(job.id, limit)
            running.append(
                RunningJob(
                    id=job.id,
                    team=job.team,
                    user=job.user,
                    queue=job.queue,
                    gpu_class=admission.gpu_class,
                    pods=admission.nodes,
                    gpu_eq_per_pod=admission.gpu_eq / len(admission.nodes),
                    runtime_limit=limit,
                    started_at=now,
                    priority=job.priority,
                    capacity=admission.capacity,
                    reservation_id=admission.reservation_id,
                    forecast=job.forecast,
                )
            )
        # the next plan gets where this one reserved each waiting job's start, as the
        # reconcile passes it on (``PendingJob.planned_nodes``)
        planned = dict(result.planned_nodes)
        for job_id, job in waiting.items():
            if job.planned_nodes != planned.get(job_id):
                waiting[job_id] = replace(job, planned_nodes=planned.get(job_id))
        later = [ends[job.id] for job in running if ends[job.id] > now]
        if not waiting or not later:
            break
        now = min(later)
        running = [job for job in running if ends[job.id] > now]
    return started
