"""Elastic capacity: a day of bursty submissions on a cluster whose node pools grow and shrink.

The admission engine itself (``queues.admission.plan``, node pools and all) decides every
minute of one simulated day: what to admit, how many nodes to ask each pool for
(``Plan.scale_up``), and which empty nodes may go (``scale_down``). A simulated provisioner
brings each node after a lead time drawn from a log-normal with the pool's median and 90th
percentile (seeded), and fails one request in twenty (the engine then asks again). Jobs run a
random share of their runtime limits. Time is simulated: a day takes seconds to a minute.

The cluster: 2 fixed L4 nodes (4 GPUs each) and 2 fixed H100 nodes (8 GPUs each); an L4 pool
of up to 6 nodes (lead 4 min, p90 7 min) and an H100 pool of up to 4 (lead 6 min, p90 9 min),
both removing nodes empty for 10 min. Queues: ``interactive`` (L4, 1-4 GPUs, 10-60 min, bursts
in working hours), ``batch`` (H100 or L4, 1-8 GPUs, 1-4 h, may scale both pools) and
``training`` (H100, 8 or 16 GPUs, 2-6 h, may scale the H100 pool). ``interactive`` may not add
nodes: it runs on what is there and on what its warm floor keeps ready.

Settings compared (same arrivals, same draws): no pools at all (the fixed cluster), then pools
with interactive's warm floor on L4 at 0, 1 and 2 nodes.

Reported per setting: waits per queue (median, p90, max; minutes; jobs still waiting six hours
after the day are counted as never started), GPU-hours the pools'
nodes were up (provisioned), of them idle (a pool node with nothing on it), GPU-hours held
empty for warm floors (any node of the class, fixed ones too), and nodes asked for.

    python bench/bench_elastic.py [--seed 3] [--step 60] [--output FILE]
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queues.admission import NodePool, PendingJob, RunningJob, plan
from queues.admission.elastic import scale_down, warm_nodes
from queues.admission.testing import NOW, node, queue, snapshot, team

H100, L4 = "h100-80gb", "l4-24gb"
DAY = timedelta(hours=24)
Z90 = 1.2815515655446004
FAILURE_RATE = 0.05

QUEUES = (
    queue("interactive", priority=30, gpu_classes=(L4,), max_runtime=timedelta(hours=2)),
    queue("batch", priority=10, gpu_classes=(H100, L4), default_runtime=timedelta(hours=4)),
    queue("training", priority=20, gpu_classes=(H100,), default_runtime=timedelta(hours=6)),
)


@dataclass(frozen=True)
class Arrival:
    id: int
    at: datetime
    queue: str
    capability: str
    pods: int
    gpus: int
    limit: timedelta
    runs: float  # share of the limit it really runs


def arrivals(seed: int) -> list[Arrival]:
    """A day of submissions: interactive bursts at 09:00-11:00 and 14:00-16:00, batch all day
    with a burst at 13:00, training a few an hour in the working day."""
    rng = random.Random(seed)
    found: list[Arrival] = []

    def rate(queue_name: str, hour: float) -> float:  # jobs per hour
        if queue_name == "interactive":
            return 14.0 if 9 <= hour < 11 or 14 <= hour < 16 else (3.0 if 8 <= hour < 19 else 0.3)
        if queue_name == "batch":
            return 8.0 if 13 <= hour < 14 else 2.0
        return 1.0 if 8 <= hour < 18 else 0.2

    for queue_name in ("interactive", "batch", "training"):
        t = 0.0
        while t < 24 * 3600:
            t += rng.expovariate(rate(queue_name, t / 3600) / 3600)
            if t >= 24 * 3600:
                break
            if queue_name == "interactive":
                shape = ("any-gpu", 1, rng.choice((1, 1, 2, 4)), rng.uniform(10, 60))
            elif queue_name == "batch":
                capability = rng.choice(("any-gpu", "h100"))
                gpus = rng.choice((1, 2, 4, 8)) if capability == "h100" else rng.choice((1, 2, 4))
                shape = (capability, 1, gpus, rng.uniform(60, 240))
            else:
                shape = ("h100", rng.choice((1, 1, 2)), 8, rng.uniform(120, 360))
            capability, pods, gpus, minutes = shape
            found.append(
                Arrival(
                    0,
                    NOW + timedelta(seconds=t),
                    queue_name,
                    capability,
                    pods,
                    gpus,
                    timedelta(minutes=round(minutes)),
                    rng.uniform(0.4, 1.0),
                )
            )
    found.sort(key=lambda a: a.at)
    return [replace(a, id=index + 1) for index, a in enumerate(found)]


@dataclass
class PoolState:
    spec: NodePool
    lead_median: float
    lead_p90: float
    members: list[str] = field(default_factory=list)
    coming: list[tuple[datetime, datetime, bool]] = field(default_factory=list)  # asked, due, fails
    made: int = 0
    asked: int = 0
    failed: int = 0


@dataclass
class Result:
    name: str
    waits: dict[str, list[float]]
    unstarted: dict[str, int]
    provisioned_gpu_hours: float
    pool_idle_gpu_hours: float
    warm_held_gpu_hours: float
    nodes_asked: int
    failed: int
    plans: int
    seconds: float


def pools_for(warm: int | None) -> list[NodePool]:
    if warm is None:
        return []
    return [
        NodePool(
            name="h100-pool",
            gpu_class=H100,
            max_nodes=4,
            template=node("t", H100, gpus=8, rack="r9"),
            lead_median=timedelta(minutes=6),
            lead_p90=timedelta(minutes=9),
            scale_up_queues=("batch", "training"),
            scale_down_delay=timedelta(minutes=10),
        ),
        NodePool(
            name="l4-pool",
            gpu_class=L4,
            max_nodes=6,
            template=node("t", L4, gpus=4, rack="r9"),
            lead_median=timedelta(minutes=4),
            lead_p90=timedelta(minutes=7),
            scale_up_queues=("batch",),
            warm_floors=(("interactive", warm),) if warm else (),
            scale_down_delay=timedelta(minutes=10),
        ),
    ]


def replay(name: str, warm: int | None, jobs: list[Arrival], *, seed: int, step: int) -> Result:
    rng = random.Random(seed * 1000 + 17)
    started_clock = time.perf_counter()
    fixed = [
        node("l4-a", L4, gpus=4),
        node("l4-b", L4, gpus=4),
        node("h100-a", H100, gpus=8),
        node("h100-b", H100, gpus=8),
    ]
    nodes = {n.name: n for n in fixed}
    pools = {
        p.name: PoolState(p, p.lead_median.total_seconds(), p.lead_p90.total_seconds())
        for p in pools_for(warm)
    }
    teams = (team("lab", {H100: 512, L4: 512}),)
    waiting: dict[int, Arrival] = {}
    running: dict[int, tuple[RunningJob, datetime]] = {}
    waits: dict[str, list[float]] = {q.name: [] for q in QUEUES}
    empty_since: dict[str, datetime] = {}
    provisioned = pool_idle = warm_held = 0.0
    plans = 0
    upcoming = list(jobs)
    now = NOW
    end = NOW + DAY
    # the day, then at most 6 hours more for what still waits (never started: counted apart)
    while now <= end or (waiting and now <= end + timedelta(hours=6)):
        # nodes that came (or failed), jobs that ended, jobs that arrived
        for pool in pools.values():
            still = []
            for asked, due, fails in pool.coming:
                if due > now:
                    still.append((asked, due, fails))
                elif fails:
                    pool.failed += 1
                else:
                    pool.made += 1
                    member = f"{pool.spec.name}-{pool.made:03d}"
                    nodes[member] = replace(pool.spec.template, name=member)
                    pool.members.append(member)
            pool.coming = still
        for job_id, (_job, ends) in list(running.items()):
            if ends <= now:
                del running[job_id]
        while upcoming and upcoming[0].at <= now:
            arrival = upcoming.pop(0)
            waiting[arrival.id] = arrival
        snap = snapshot(
            now=now,
            nodes=list(nodes.values()),
            queues=QUEUES,
            teams=teams,
            running=[job for job, _ in running.values()],
            pending=[
                PendingJob(
                    id=a.id,
                    queue=a.queue,
                    team="lab",
                    user="u",
                    capability=a.capability,
                    submitted_at=a.at,
                    pods=a.pods,
                    gpus_per_pod=a.gpus,
                    runtime_limit=a.limit,
                )
                for a in waiting.values()
            ],
            node_pools=tuple(
                replace(
                    p.spec,
                    members=tuple(p.members),
                    provisioning=tuple(asked for asked, _, _ in p.coming),
                )
                for p in pools.values()
            ),
        )
        result = plan(snap)
        plans += 1
        for admission in result.admissions:
            arrival = waiting.pop(admission.job_id)
            per_pod = admission.gpu_eq / len(admission.nodes)
            job = RunningJob(
                id=arrival.id,
                team="lab",
                user="u",
                queue=arrival.queue,
                gpu_class=admission.gpu_class,
                pods=admission.nodes,
                gpu_eq_per_pod=per_pod,
                runtime_limit=arrival.limit,
                started_at=now,
            )
            running[arrival.id] = (job, now + arrival.limit * arrival.runs)
            waits[arrival.queue].append((now - arrival.at).total_seconds() / 60)
        for ask in result.scale_up or ():
            pool = pools[ask.pool]
            for _ in range(ask.nodes):
                sigma = math.log(pool.lead_p90 / pool.lead_median) / Z90
                lead = pool.lead_median * math.exp(rng.gauss(0.0, sigma))
                fails = rng.random() < FAILURE_RATE
                pool.coming.append((now, now + timedelta(seconds=lead), fails))
                pool.asked += 1
        # what sits empty, what is held warm, what goes
        busy = {n for job, _ in running.values() for n in job.pods}
        after = replace(snap, running=tuple(job for job, _ in running.values()), pending=())
        held = set(warm_nodes(after)) if pools else set()
        for node_name, n in nodes.items():
            if node_name in busy:
                empty_since.pop(node_name, None)
            else:
                empty_since.setdefault(node_name, now)
            if node_name in held:
                warm_held += n.gpus * step / 3600
        for pool in pools.values():
            for member in pool.members:
                provisioned += nodes[member].gpus * step / 3600
                if member not in busy:
                    pool_idle += nodes[member].gpus * step / 3600
        if pools:
            for gone in scale_down(after, empty_since, held=held):
                del nodes[gone]
                empty_since.pop(gone, None)
                for pool in pools.values():
                    if gone in pool.members:
                        pool.members.remove(gone)
        now += timedelta(seconds=step)
    unstarted = {q.name: sum(1 for a in waiting.values() if a.queue == q.name) for q in QUEUES}
    return Result(
        name,
        waits,
        unstarted,
        provisioned,
        pool_idle,
        warm_held,
        sum(p.asked for p in pools.values()),
        sum(p.failed for p in pools.values()),
        plans,
        time.perf_counter() - started_clock,
    )


def quantile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(share * len(ordered))) - 1]


def table(results: list[Result], jobs: list[Arrival]) -> str:
    counts = {q.name: sum(1 for a in jobs if a.queue == q.name) for q in QUEUES}
    lines = [
        "| setting | interactive wait p50 / p90 / max | batch wait p50 / p90 / max | "
        "training wait p50 / p90 / max | pool GPU-h up | of them idle | held warm GPU-h | "
        "nodes asked (failed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        cells = []
        for q in ("interactive", "batch", "training"):
            w = r.waits[q]
            text = f"{quantile(w, 0.5):.1f} / {quantile(w, 0.9):.1f} / {max(w, default=0):.0f} min"
            if r.unstarted[q]:
                text += f" ({r.unstarted[q]} never started)"
            cells.append(text)
        lines.append(
            f"| {r.name} | {' | '.join(cells)} | {r.provisioned_gpu_hours:.1f} | "
            f"{r.pool_idle_gpu_hours:.1f} | {r.warm_held_gpu_hours:.1f} | "
            f"{r.nodes_asked} ({r.failed}) |"
        )
    lines.append("")
    lines.append(
        "Jobs: "
        + ", ".join(f"{q} {n}" for q, n in counts.items())
        + "; mean waits (min): "
        + "; ".join(
            f"{r.name}: "
            + ", ".join(f"{q} {statistics.fmean(r.waits[q] or [0]):.1f}" for q in counts)
            for r in results
        )
    )
    lines.append(
        "Replay time: "
        + ", ".join(f"{r.name} {r.seconds:.0f} s ({r.plans} plans)" for r in results)
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--step", type=int, default=60, help="simulated seconds between plans")
    parser.add_argument("--output", type=Path, default=None)
    options = parser.parse_args()
    jobs = arrivals(options.seed)
    settings: list[tuple[str, int | None]] = [
        ("fixed cluster (no pools)", None),
        ("pools, interactive warm floor 0", 0),
        ("pools, interactive warm floor 1 L4 node", 1),
        ("pools, interactive warm floor 2 L4 nodes", 2),
    ]
    results = [
        replay(name, warm, jobs, seed=options.seed, step=options.step) for name, warm in settings
    ]
    machine = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    text = f"Seed {options.seed}, a plan every {options.step} s; {machine}\n\n" + table(
        results, jobs
    )
    print(text)
    if options.output:
        options.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
