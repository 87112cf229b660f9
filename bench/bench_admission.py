"""Benchmark the admission engine on the issue's synthetic cluster.

500 nodes / 4,000 GPUs (H100, A100 with some MIG nodes, L4 with some time-sliced nodes, T4),
2,000 running jobs, 50 teams, 12 queues, and 1k / 10k / 50k pending jobs. Times one full plan —
admissions, preemptions, reasons and estimated starts for every pending job — best of a few runs,
beside the same plan without estimates (``estimates=False``, the runs alternating), and once
with the queues' default jobs as probes (one per queue for each of
the first ``--probe-teams`` teams: 12 × 5 = 60 by default), and prints a markdown table
(``--output FILE`` also writes it there).

Every running and pending job carries a runtime forecast the way the reconcile gives one
(``queues/reconcile/snapshot.py``, ``forecast_for``): its queue's history (``QUEUE_HISTORY``) or,
for a queue without enough, the default prior, shifted by its user's own history for some users.
So the forecast's four scenarios (at the latest, likely, low, high) differ, as in production.
``--no-history`` measures the older way: no job has a forecast, every job runs to its limit in
every scenario.

    python bench/bench_admission.py [--sizes 1000,10000,50000] [--repeat 3] [--probe-teams 5]
                                    [--no-history] [--profile] [--profile-size 10000]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queues.admission import (
    Forecast,
    MaintenanceState,
    MigSlots,
    Node,
    PendingJob,
    Plan,
    Quota,
    Reservation,
    RunningJob,
    Snapshot,
    Team,
    default_probe,
    plan,
)
from queues.admission.snapshot import CapacityKind
from queues.admission.testing import CAPABILITIES, GPU_CLASSES, NOW, queue

CLASS_NODES = (("h100-80gb", 200), ("a100-40gb", 150), ("l4-24gb", 100), ("t4-16gb", 50))
MIG_NODES = 20  # of the A100 nodes
SLICED_NODES = 20  # of the L4 nodes

# Actual ÷ requested runtime per queue, as ``runtime_forecasts`` learns it (mean, 10th and 90th
# percentile); a queue not listed has too little history and takes the reconcile's default prior.
DEFAULT_PRIOR = (0.7, 0.3, 1.0)
QUEUE_HISTORY = {
    "interactive": (0.45, 0.15, 1.0),
    "interactive-mig": (0.4, 0.1, 0.9),
    "training": (0.8, 0.4, 1.0),
    "training-rack": (0.85, 0.5, 1.0),
    "batch": (0.6, 0.2, 0.95),
    "scavenger": (0.5, 0.1, 0.9),
    "eval": (0.3, 0.1, 0.7),
    "finetune": (0.75, 0.35, 1.0),
}
# A user's own history moves their jobs' forecast (``forecast_for``: the group's mean shrunk
# toward the queue's): a quarter of the users run shorter than their queue, a tenth longer.
USER_SHIFTS = (-0.2, -0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1)


def forecast_of(queue_name: str, user: str | None = None) -> Forecast:
    """A job's runtime forecast the way ``forecast_for`` makes one (deterministic per user);
    without a user, the queue's own (its default job's)."""
    mean, low, high = QUEUE_HISTORY.get(queue_name, DEFAULT_PRIOR)
    shift = 0.0
    if user is not None:
        shift = USER_SHIFTS[int(user.rsplit("-", 1)[1]) % len(USER_SHIFTS)]
    likely = min(1.0, max(0.05, mean + shift))
    return Forecast(
        likely=likely,
        low=min(likely, max(0.01, low + shift)),
        high=max(likely, min(1.0, high + shift)),
    )


def build_queues() -> tuple:
    hours = timedelta(hours=1)
    grace = timedelta(minutes=5)
    return (
        queue("interactive", priority=30, default_runtime=2 * hours, max_running_jobs_per_user=2),
        queue("interactive-mig", priority=30, sharing="mig", default_runtime=2 * hours),
        queue("notebooks", priority=25, sharing="time-sliced", default_runtime=4 * hours),
        queue("training", priority=20, default_runtime=8 * hours),
        queue("training-rack", priority=20, default_runtime=12 * hours, required_topology="rack"),
        queue("research", priority=15, default_runtime=6 * hours, max_gpu_eq_per_user=Fraction(16)),
        queue(
            "batch",
            priority=10,
            preemption="graceful",
            grace_period=grace,
            may_borrow=True,
            default_runtime=6 * hours,
        ),
        queue(
            "scavenger",
            priority=0,
            preemption="preemptible",
            may_borrow=True,
            default_runtime=3 * hours,
        ),
        queue("inference", priority=40, reservation_only=True, default_runtime=24 * hours),
        queue("eval", priority=18, default_runtime=1 * hours),
        queue(
            "finetune",
            priority=22,
            default_runtime=10 * hours,
            gpu_classes=("h100-80gb", "a100-40gb"),
        ),
        queue("cheap", priority=5, default_runtime=2 * hours, gpu_classes=("t4-16gb", "l4-24gb")),
    )


def build_snapshot(pending_count: int, seed: int = 7, *, history: bool = True) -> Snapshot:
    """The synthetic cluster of the issue, deterministic for a seed; with ``history`` every
    running and pending job has a runtime forecast (``forecast_of``), without none."""
    rng = random.Random(seed)
    nodes: list[Node] = []
    counter = 0
    for gpu_class, count in CLASS_NODES:
        for i in range(count):
            name = f"{gpu_class.split('-')[0]}-{i:03d}"
            rack = f"rack-{counter // 10:02d}"
            domain = f"dom-{counter // 50}"
            counter += 1
            fields: dict = {"rack": rack, "network_domain": domain}
            if gpu_class == "a100-40gb" and i < MIG_NODES:
                fields["mig"] = (MigSlots("1g.5gb", 28), MigSlots("3g.20gb", 4 * 2))
            if gpu_class == "l4-24gb" and i < SLICED_NODES:
                fields["time_slice_replicas"] = 4
            if counter % 97 == 0:
                fields["healthy"] = False
                fields["health_reason"] = "XID 79"
            elif counter % 61 == 0:
                fields["maintenance"] = MaintenanceState.DRAINING
                fields["maintenance_reason"] = "kernel upgrade"
                fields["maintenance_until"] = NOW + timedelta(hours=3)
            nodes.append(Node(name=name, gpu_class=gpu_class, gpus=8, **fields))
    capacity = Counter()
    for n in nodes:
        capacity[n.gpu_class] += n.gpus
    teams = []
    for t in range(50):
        quotas = tuple(
            Quota(g, Fraction(int(capacity[g] * 0.017)), Fraction(int(capacity[g] * 0.01)))
            for g, _ in CLASS_NODES
        )
        teams.append(
            Team(
                f"team-{t:02d}",
                Fraction(rng.choice([1, 1, 2, 3])),
                quotas,
                Fraction(rng.randint(0, 5000)),
            )
        )
    reservations = (
        Reservation(1, "team-00", "h100-80gb", Fraction(16), queue="inference"),
        Reservation(2, "team-01", "a100-40gb", Fraction(8), queue="inference"),
        Reservation(
            3,
            "team-02",
            "h100-80gb",
            Fraction(16),
            start=NOW + timedelta(hours=2),
            end=NOW + timedelta(hours=8),
        ),
    )
    running = _fill(nodes, teams, rng)
    queues = build_queues()
    pending = _pending(pending_count, teams, rng)
    if history:
        running = [replace(j, forecast=forecast_of(j.queue, j.user)) for j in running]
        pending = [replace(j, forecast=forecast_of(j.queue, j.user)) for j in pending]
        queues = tuple(replace(q, forecast=forecast_of(q.name)) for q in queues)
    return Snapshot(
        now=NOW,
        gpu_classes=GPU_CLASSES,
        nodes=tuple(nodes),
        queues=queues,
        capability_classes=CAPABILITIES,
        teams=tuple(teams),
        reservations=reservations,
        running=tuple(running),
        pending=tuple(pending),
    )


def with_probes(snapshot: Snapshot, teams_per_queue: int) -> Snapshot:
    """``snapshot`` with each queue's default job as a probe for its first ``teams_per_queue``
    teams that may use it (queues without a default job get none)."""
    probes: list[PendingJob] = []
    for queue_terms in snapshot.queues:
        teams = [
            t.name for t in snapshot.teams if not queue_terms.teams or t.name in queue_terms.teams
        ]
        for team_name in teams[:teams_per_queue]:
            probe = default_probe(
                queue_terms,
                team_name,
                snapshot.now,
                len(probes) + 1,
                gpu_classes=snapshot.gpu_classes,
                capability_classes=snapshot.capability_classes,
            )
            if probe is not None:
                probes.append(probe)
    return replace(snapshot, probes=tuple(probes))


def _fill(nodes: list[Node], teams: list[Team], rng: random.Random) -> list[RunningJob]:
    """2,000 running jobs packed onto the healthy exclusive nodes, about 85 % full."""
    jobs: list[RunningJob] = []
    per_team: Counter = Counter()
    targets = [
        n
        for n in nodes
        if not n.mig
        and n.time_slice_replicas == 1
        and n.healthy
        and n.maintenance is MaintenanceState.NONE
    ]
    job_id = 1
    for node in targets:
        free = node.gpus
        while free > 0 and len(jobs) < 2000:
            size = min(free, rng.choice([1, 1, 2, 2, 4, 8]))
            if rng.random() < 0.2 and free < 8:
                break
            team = teams[rng.randrange(len(teams))]
            borrowed = rng.random() < 0.15
            jobs.append(
                RunningJob(
                    id=job_id,
                    team=team.name,
                    user=f"user-{rng.randrange(400)}",
                    queue="batch"
                    if borrowed
                    else rng.choice(["training", "research", "eval", "finetune"]),
                    gpu_class=node.gpu_class,
                    pods=(node.name,),
                    gpu_eq_per_pod=Fraction(size),
                    runtime_limit=timedelta(hours=rng.choice([2, 4, 8, 12, 24])),
                    started_at=NOW - timedelta(minutes=rng.randrange(1, 120)),
                    checkpoint_interval=timedelta(minutes=30),
                    capacity=CapacityKind.BORROWED if borrowed else CapacityKind.NOMINAL,
                )
            )
            per_team[team.name] += size
            job_id += 1
            free -= size
    return jobs


def _pending(count: int, teams: list[Team], rng: random.Random) -> list[PendingJob]:
    shapes = [
        ("training", "any-40gb", 1, 1, 30),
        ("training", "any-40gb", 1, 4, 10),
        ("training", "h100", 1, 8, 8),
        ("training-rack", "h100", 4, 8, 3),
        ("interactive", "any-gpu", 1, 1, 12),
        ("interactive-mig", "mig-1g", 1, 1, 8),
        ("notebooks", "any-gpu", 1, 1, 6),
        ("research", "any-40gb", 2, 4, 4),
        ("batch", "any-gpu", 1, 2, 8),
        ("scavenger", "any-gpu", 1, 1, 4),
        ("eval", "small-inference", 1, 1, 4),
        ("finetune", "a100", 1, 8, 2),
        ("cheap", "small-inference", 1, 1, 1),
    ]
    weights = [s[4] for s in shapes]
    jobs = []
    for i in range(count):
        queue_name, capability, pods, gpus, _ = rng.choices(shapes, weights)[0]
        team = teams[rng.randrange(len(teams))]
        if queue_name == "interactive-mig":
            capability = "mig-1g"
        jobs.append(
            PendingJob(
                id=100_000 + i,
                queue=queue_name,
                team=team.name,
                user=f"user-{rng.randrange(400)}",
                capability=capability if queue_name != "interactive-mig" else "any-gpu",
                submitted_at=NOW - timedelta(seconds=rng.randrange(1, 86_400)),
                pods=pods,
                gpus_per_pod=gpus,
                priority=rng.choice([0, 0, 0, 1]),
            )
        )
    return jobs


def _probe_summary(snapshot: Snapshot, result: Plan) -> str:
    """How many probes start now, later (with the median wait), or never."""
    waits = [
        (estimate.at - snapshot.now).total_seconds() / 3600
        for _, estimate in result.probe_estimates
        if estimate.at is not None
    ]
    now = sum(1 for wait in waits if wait == 0)
    later = [wait for wait in waits if wait > 0]
    unknown = len(result.probe_estimates) - len(waits)
    median = f" (median wait {statistics.median(later):.1f} h)" if later else ""
    return (
        f"{len(result.probe_estimates)} probes: {now} start now, {len(later)} later{median}, "
        f"{unknown} never"
    )


def time_plan(snapshot: Snapshot, repeat: int, *, estimates: bool = True) -> tuple[float, Plan]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        result = None
        gc.collect()  # every run starts from the same heap, whatever ran before
        start = time.perf_counter()
        result = plan(snapshot, estimates=estimates)
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return best, result


def cpu_plan(snapshot: Snapshot, *, estimates: bool) -> tuple[float, float, Plan]:
    """One plan's wall time and the CPU time of this process (less moved by other work)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = plan(snapshot, estimates=estimates)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def time_both(snapshot: Snapshot, repeat: int) -> tuple[list[float], Plan]:
    """The plan without and with estimates, alternating run by run so that both see the same
    load on a shared machine: the best wall and CPU times of ``repeat`` runs each, as
    [wall without, wall with, CPU without, CPU with]."""
    best = [float("inf")] * 4
    result = None
    for _ in range(repeat):
        wall, cpu, _ = cpu_plan(snapshot, estimates=False)
        best[0], best[2] = min(best[0], wall), min(best[2], cpu)
        result = None
        wall, cpu, result = cpu_plan(snapshot, estimates=True)
        best[1], best[3] = min(best[1], wall), min(best[3], cpu)
    assert result is not None
    return best, result


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()} ({platform.system()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--probe-teams", type=int, default=5, help="probes per queue (one per team), 0 for none"
    )
    parser.add_argument(
        "--no-history",
        action="store_true",
        help="no job has a runtime forecast (every scenario runs jobs to their limits)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one plan (with its probes)"
    )
    parser.add_argument("--profile-size", type=int, default=10_000, help="pending jobs to profile")
    parser.add_argument("--output", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    cost_rows = []
    timings: dict[int, float] = {}
    probe_notes = []
    for size in sizes:
        snapshot = build_snapshot(size, history=not args.no_history)
        best, result = time_both(snapshot, args.repeat)
        seconds = best[1]
        timings[size] = seconds
        cost_rows.append(
            f"| {size:,} | {best[0]:.3f} | {best[1]:.3f} | {best[1] / best[0]:.2f} "
            f"| {best[2]:.3f} | {best[3]:.3f} | {best[3] / best[2]:.2f} |"
        )
        codes = Counter(s.reasons[0].code.value for s in result.pending)
        unknown = sum(1 for s in result.pending if s.estimated_start.at is None)
        counts = (len(result.admissions), len(result.preemptions), len(result.pending))
        del result  # a big live plan makes the next run's garbage collection slower
        probed = with_probes(snapshot, args.probe_teams)
        probe_seconds, probe_result = time_plan(probed, args.repeat)
        probe_notes.append(f"{size:,} pending: " + _probe_summary(probed, probe_result))
        del probe_result
        rows.append(
            f"| {size:,} | {seconds:.3f} | {probe_seconds:.3f} | {counts[0]} | {counts[1]} | "
            f"{counts[2]:,} | {unknown:,} | "
            + ", ".join(f"{c} {n}" for c, n in codes.most_common(4))
            + " |"
        )
    lines = [
        f"Machine: {machine()}; one process, one core used.",
        "",
        "Cluster: 500 nodes / 4,000 GPUs, 2,000 running jobs, 50 teams, 12 queues; "
        + (
            "no job has runtime history (every scenario runs jobs to their limits)."
            if args.no_history
            else "every job has a runtime forecast (its queue's history or the default prior)."
        ),
        "",
        f"| pending | plan (s, best of {args.repeat}) | with probes (s) | admitted | preempted "
        "| pending statuses | start unknown | top binding reasons |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *rows,
        "",
        f"Probes: each queue's default job for its first {args.probe_teams} teams.",
        *(f"- {note}" for note in probe_notes),
    ]
    lines += [
        "",
        "What the estimates cost: the same plan without them (`estimates=False`), the runs of",
        "the two alternating so that both see the same load (best of each):",
        "",
        "| pending | without estimates (s) | with (s) | with / without "
        "| CPU without (s) | CPU with (s) | CPU with / without |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *cost_rows,
    ]
    if 10_000 in timings and 50_000 in timings:
        lines += [
            "",
            f"50k / 10k time ratio (with estimates): {timings[50_000] / timings[10_000]:.1f}",
        ]
    table = "\n".join(lines)
    print(table)
    if args.output:
        args.output.write_text("# Admission engine benchmark\n\n" + table + "\n")
    if args.profile:
        snapshot = with_probes(
            build_snapshot(args.profile_size, history=not args.no_history), args.probe_teams
        )
        profiler = cProfile.Profile()
        profiler.enable()
        plan(snapshot)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
