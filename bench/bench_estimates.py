"""Replay benchmark of estimated starts through the portal's own stack.

A simulated cluster of 64 H100s (8 nodes × 8) served over HTTP, the real reconcile cycle, the
REST API for every submission and every reading, PostgreSQL. Jobs of mixed shapes (1-8 GPUs,
gangs of 2 × 8), runtime limits of 3-10 minutes, real run times 30-100 % of the limits (each
user and image has its own typical share, so history can learn it), submitted in bursts that
oversubscribe the cluster. The first burst is a warm-up: it gives the runtime history a start
and is not scored.

Time: the cluster's clock is a manual clock moved one reconcile period (5 s) per cycle, and the
portal's clock (``django.utils.timezone.now``) is that same clock, so submissions, the cycle, the
cluster's pods and every stored time agree; a cycle runs as soon as the previous one is done
(simulated time runs faster than real time, and nothing else changes).

For every scored job it records what the API showed at the first cycle after submit and at the
cycle closest to halfway through its wait, and compares with its real start (``started_at``):
relative error = |predicted − actual| / actual wait, over jobs that waited at least a minute.
Baselines: the queue's published expected wait (the queue API's ``expected_wait_seconds`` at
submit, for the team's default job) and position × mean runtime (the job's position in the
queue × the mean runtime of finished jobs × mean GPUs per job / GPUs in the cluster).

    python bench/bench_estimates.py [--jobs 300] [--seed 5] [--output FILE]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench import synthetic
from queues.policy.text import policy_yaml

DATABASE = "estimate_bench"  # a private database on the local PostgreSQL
PERIOD = 5.0  # seconds: the reconcile period
NODES = 8
GPUS_PER_NODE = 8
USERS = ("ada", "ben", "cai", "dee")
IMAGES = ("registry.example.com/train:1", "registry.example.com/eval:2")
SHAPES = ((1, 1), (1, 1), (1, 2), (1, 2), (1, 4), (1, 4), (1, 8), (2, 8))  # (pods, GPUs per pod)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def policy() -> dict[str, Any]:
    return {
        "fair_share": {"usage_half_life": "7d"},
        "gpu_classes": [
            {
                "name": "h100-80gb",
                "product": "NVIDIA-H100-80GB-HBM3",
                "hbm_gb": 80,
                "precisions": ["fp64", "tf32", "bf16", "fp16", "fp8", "int8"],
                "tier": 4,
            }
        ],
        "capability_classes": [{"name": "any-gpu", "description": "Any GPU."}],
        "teams": [
            {
                "name": "lab",
                "namespace": "lab",
                "cost_center": "CC-1",
                "members": list(USERS),
                "quotas": {"h100-80gb": {"nominal": 48, "borrowing_limit": 0}},
            }
        ],
        "queues": [
            {
                "name": "train",
                "priority": 10,
                "expected_wait_target": "1h",
                "max_runtime": "15m",
                "default_runtime": "5m",
                "preemption_class": "never",
                "sharing_mode": "exclusive",
                "allowed_gpu_classes": ["h100-80gb"],
                "allowed_capability_classes": ["any-gpu"],
                "max_gpus_per_job": 16,
                "teams": ["lab"],
            }
        ],
        "rate_cards": [
            {
                "effective_from": "2026-01-01T00:00:00Z",
                "currency": "EUR",
                "price_per_normalized_gpu_hour": 1.2,
                "weights": {"h100-80gb": 4},
            }
        ],
    }


def cluster_spec() -> dict[str, Any]:
    return {
        "simulation": {"default_duration_seconds": 600, "image_pull_seconds": 0},
        "node_defaults": {"allocatable": {"pods": "110"}},
        "node_groups": [
            {
                "name": "h100",
                "labels": {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                    "nvidia.com/gpu.memory": str(80 * 1024),
                },
                "allocatable": {
                    "cpu": "190",
                    "memory": "1900Gi",
                    "nvidia.com/gpu": str(GPUS_PER_NODE),
                },
                "nodes": [
                    {"name": f"h100-{i:02d}", "labels": {"topology.kubernetes.io/rack": "r1"}}
                    for i in range(NODES)
                ],
            }
        ],
    }


@dataclass
class Planned:
    """A job of the trace: when it is submitted (seconds from the start) and what it is."""

    at: float
    user: str
    image: str
    pods: int
    gpus: int
    limit_minutes: int
    ratio: float
    warmup: bool


@dataclass
class Seen:
    """What the API showed about one job at one cycle (times as seconds from the start)."""

    at: float
    likely: float | None
    latest: float | None
    low: float | None
    high: float | None
    position: int | None


@dataclass
class Record:
    plan: Planned
    job_id: int
    submitted: float
    queue_wait: float | None = None  # the queue's published expected wait at submit (s)
    seen: list[Seen] = field(default_factory=list)


def trace(jobs: int, seed: int) -> list[Planned]:
    """The warm-up burst (a fifth of the jobs) at 0, then bursts every 3-5 minutes."""
    rng = random.Random(seed)
    centre = {(u, i): rng.uniform(0.45, 0.85) for u in USERS for i in IMAGES}
    planned = []
    warmup = jobs // 5
    at = 0.0
    while len(planned) < jobs:
        burst = warmup if not planned else rng.randint(20, 40)
        for _ in range(min(burst, jobs - len(planned))):
            user, image = rng.choice(USERS), rng.choice(IMAGES)
            pods, gpus = rng.choice(SHAPES)
            ratio = min(1.0, max(0.3, centre[(user, image)] + rng.uniform(-0.15, 0.15)))
            planned.append(
                Planned(
                    at + rng.uniform(0, 20),
                    user,
                    image,
                    pods,
                    gpus,
                    rng.randint(3, 10),
                    ratio,
                    warmup=not at,
                )
            )
        at += rng.uniform(180, 300)
    return sorted(planned, key=lambda p: p.at)


def seconds(value: str | None, start: datetime) -> float | None:
    if not value:
        return None
    return (datetime.fromisoformat(value.replace("Z", "+00:00")) - start).total_seconds()


def run(jobs: int, seed: int) -> tuple[list[Record], dict[int, float | None], float, int]:
    from simcluster import ManualClock, SimCluster, SimServer, parse_cluster

    clock = ManualClock(START)
    cluster = SimCluster(parse_cluster(cluster_spec()), clock=clock, history_size=100_000)
    server = SimServer(cluster, tick_interval=None).start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-estimates-"))
    kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")

    synthetic.database_create(DATABASE)
    synthetic.django_setup(DATABASE)
    import io

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone
    from rest_framework.test import APIClient

    # The portal's clock is the cluster's: every stored time is simulated time.
    timezone.now = clock.now  # type: ignore[assignment]
    call_command("migrate", verbosity=0)
    (tmp / "policy.yaml").write_text(policy_yaml(policy()))
    call_command("apply_policy", str(tmp / "policy.yaml"), stdout=io.StringIO())

    from queues.cluster.adapter import Cluster
    from queues.models import Job
    from queues.reconcile.cycle import reconcile_cycle

    adapter = Cluster.from_kubeconfig(str(kubeconfig))
    users = {u.username: u for u in get_user_model().objects.filter(username__in=USERS)}
    clients = {}
    for name, user in users.items():
        client = APIClient(SERVER_NAME="localhost")
        client.force_authenticate(user)
        clients[name] = client
    planned = trace(jobs, seed)
    records: list[Record] = []
    fresh: list[Record] = []
    by_id: dict[int, Record] = {}
    cursor = 0
    cycles = 0
    wall = time.perf_counter()
    while True:
        now = (clock.now() - START).total_seconds()
        while cursor < len(planned) and planned[cursor].at <= now:
            p = planned[cursor]
            cursor += 1
            duration = round(p.limit_minutes * 60 * p.ratio)
            response = clients[p.user].post(
                "/api/jobs/",
                {
                    "team": "lab",
                    "queue": "train",
                    "capability_class": "any-gpu",
                    "image": p.image,
                    "command": ["python", "run.py"],
                    "pods": p.pods,
                    "gpus_per_pod": p.gpus,
                    "runtime_limit": p.limit_minutes * 60,
                    "env": {"SIM_DURATION_SECONDS": str(duration)},
                },
                format="json",
            )
            assert response.status_code == 201, response.content
            record = Record(p, response.json()["id"], now)
            records.append(record)
            fresh.append(record)
            by_id[record.job_id] = record
        reconcile_cycle(cluster=adapter, now=clock.now())
        cycles += 1
        if fresh:
            # what the API shows right after the submit: the job and the queue
            queue = clients["ada"].get("/api/queues/train/").json()
            wait = (queue.get("live") or {}).get("expected_wait_seconds")
            for record in fresh:
                record.queue_wait = wait
            fresh = []
        pending = Job.objects.filter(state="pending").values_list(
            "id",
            "likely_start",
            "estimated_start",
            "start_range_low",
            "start_range_high",
            "position",
        )
        for job_id, likely, latest, low, high, position in pending:
            record = by_id[job_id]
            stamp = lambda t: None if t is None else (t - START).total_seconds()  # noqa: E731
            record.seen.append(
                Seen(now, stamp(likely), stamp(latest), stamp(low), stamp(high), position)
            )
        if (
            cursor >= len(planned)
            and not Job.objects.exclude(state__in=("succeeded", "failed", "cancelled")).exists()
        ):
            break
        clock.advance(PERIOD)
    # the first reading of each job through the API itself (the same fields, serialized)
    started = {
        job_id: (at - START).total_seconds() if at else None
        for job_id, at in Job.objects.values_list("id", "started_at")
    }
    runtimes = [
        (f - s).total_seconds()
        for s, f in Job.objects.filter(state="succeeded").values_list("started_at", "finished_at")
    ]
    mean_runtime = statistics.mean(runtimes)
    adapter.close()
    server.stop()
    print(f"{cycles} cycles in {time.perf_counter() - wall:.0f} s of wall time", file=sys.stderr)
    return records, started, mean_runtime, cycles


def relative(predicted: float, actual: float, since: float) -> float:
    return abs(predicted - actual) / max(actual - since, 1.0)


def score(records: list[Record], started: dict[int, float | None], mean_runtime: float) -> str:
    mean_gpus = statistics.mean(r.plan.pods * r.plan.gpus for r in records)
    throughput = mean_runtime * mean_gpus / (NODES * GPUS_PER_NODE)
    rows: dict[str, dict[str, list[float]]] = {}
    coverage: dict[str, list[bool]] = {"submit": [], "halfway": []}
    broken: dict[str, list[float]] = {"submit": [], "halfway": []}
    scored = 0
    for record in records:
        actual = started.get(record.job_id)
        if record.plan.warmup or actual is None or not record.seen:
            continue
        if actual - record.submitted < 60:
            continue
        scored += 1
        first = record.seen[0]
        middle = min(record.seen, key=lambda s: abs(s.at - (record.submitted + actual) / 2))
        for moment, seen in (("submit", first), ("halfway", middle)):
            table = rows.setdefault(moment, {})
            if seen.likely is not None:
                table.setdefault("likely", []).append(relative(seen.likely, actual, seen.at))
            if seen.latest is not None:
                table.setdefault("at the latest", []).append(relative(seen.latest, actual, seen.at))
                broken[moment].append(actual - seen.latest)
            if seen.low is not None and seen.high is not None:
                coverage[moment].append(seen.low - PERIOD <= actual <= seen.high + PERIOD)
            if seen.position is not None:
                table.setdefault("baseline: position × mean runtime", []).append(
                    relative(seen.at + seen.position * throughput, actual, seen.at)
                )
            if moment == "submit" and record.queue_wait is not None:
                table.setdefault("baseline: queue's published expected wait", []).append(
                    relative(record.submitted + record.queue_wait, actual, record.submitted)
                )

    def pct(values: list[float], q: float) -> str:
        ordered = sorted(values)
        return f"{100 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f} %"

    lines = [
        f"Scored jobs (waited ≥ 1 min, after the warm-up burst): {scored}.",
        "",
        "| when read | predictor | jobs | median relative error | p90 relative error |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for moment, table in rows.items():
        for name, values in table.items():
            lines.append(
                f"| {moment} | {name} | {len(values)} | {pct(values, 0.5)} | {pct(values, 0.9)} |"
            )
    lines.append("")
    for moment in ("submit", "halfway"):
        covered = coverage[moment]
        late = [b for b in broken[moment] if b > PERIOD]
        share = 100 * sum(covered) / max(1, len(covered))
        lines.append(
            f"- {moment}: interval held the real start (± one reconcile period) for "
            f"{sum(covered)} of {len(covered)} jobs ({share:.0f} %); "
            f'started more than one period after "at the latest": {len(late)} '
            f"(worst {max(broken[moment], default=0):.0f} s)"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--output")
    args = parser.parse_args()
    records, started, mean_runtime, cycles = run(args.jobs, args.seed)
    machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    text = "\n".join(
        [
            f"Machine: {machine}. {args.jobs} jobs (seed {args.seed}) on {NODES} × "
            f"{GPUS_PER_NODE} simulated H100, one queue, limits 3-10 min, run times 30-100 % "
            f"of the limits; {cycles} reconcile cycles of {PERIOD:.0f} s simulated time.",
            "",
            score(records, started, mean_runtime),
        ]
    )
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    synthetic.database_drop(DATABASE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
