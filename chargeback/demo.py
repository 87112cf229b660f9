"""Demo history: the months before today, so finance opens the demo on closed months.

Several teams' jobs over ``HISTORY_MONTHS`` whole months and this month so far — whole GPUs,
MIG slices and time-sliced replicas, short notebooks and long training, some idle-heavy (each
job carries its utilization profile for the simulated cluster), a few failures, preemptions
and one drain, a rate change on the 15th of the second month, and one pod reported only after
its month was closed (an adjustment). The GPU usage goes through the reconcile's own path: the
nodes through ``nodes_sync`` (so the node-state history gives idle capacity), the pods through
``usage_sync`` day by day as the reconcile would have seen them; each month is closed with
``period_close`` once its grace has passed, in order. Jobs, their timelines and the rate card
are written as the portal writes them (``policy_edit`` for the card). Deterministic (a fixed
random seed), and seconds to run."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth import get_user_model
from django.db import transaction

from chargeback.models import Period, month_end, month_start
from chargeback.services import period_close
from queues.cluster.nodes import node_facts
from queues.cluster.pods import ContainerOutcome, PodFacts
from queues.models import (
    CapabilityClass,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Queue,
    Team,
    UsageInterval,
)
from queues.policy.apply import policy_edit
from queues.policy.export import policy_current
from queues.reconcile.facts import ClusterView, CycleReport, conventions
from queues.reconcile.nodes import nodes_sync
from queues.reconcile.usage import usage_sync

HISTORY_MONTHS = 3
SEED = 29
# A new price from the 15th of the second history month: +10 %.
RATE_CHANGE_FACTOR = Decimal("1.10")
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


@dataclass(frozen=True)
class Pattern:
    """One kind of recurring work: who, where, how big, how long, how often, how busy."""

    team: str
    user: str
    queue: str
    capability: str
    gpu_class: str
    gpus: int
    hours: float  # mean runtime
    per_day: float  # mean jobs a day
    limit_hours: int
    utilization: str  # the simulated DCGM profile (SIM_GPU_UTILIZATION)
    mig_profile: str = ""
    pods: int = 1


PATTERNS = [
    Pattern("vision", "victor", "training", "fp8", "h100-80gb", 8, 5, 0.7, 12, "0:85"),
    Pattern("vision", "mia", "interactive", "any-gpu", "t4", 1, 1.5, 3, 4, "0:30,600:5"),
    Pattern(
        "vision",
        "vera",
        "interactive-mig",
        "mig-1g.10gb",
        "a100-80gb",
        1,
        2.5,
        2,
        8,
        "0:15",
        mig_profile="1g.10gb",
    ),
    Pattern("nlp", "noah", "batch", "min-40gb", "a100-80gb", 8, 4, 1.2, 24, "0:90"),
    Pattern("nlp", "nina", "training", "bf16-large", "h100-80gb", 8, 8, 0.3, 24, "0:80", pods=2),
    Pattern(
        "nlp",
        "mia",
        "interactive-mig",
        "mig-1g.10gb",
        "a100-80gb",
        1,
        3,
        1.5,
        8,
        "0:20",
        mig_profile="1g.10gb",
    ),
    Pattern("speech", "sam", "batch", "inference-16gb", "l4", 4, 3, 2, 12, "0:70"),
    Pattern("speech", "sofia", "interactive", "any-gpu", "t4", 1, 2, 2, 4, "0:10"),
    Pattern("search", "sara", "batch", "inference-16gb", "l4", 2, 2, 3, 12, "0:60"),
    Pattern("search", "simon", "interactive", "inference-16gb", "t4", 1, 1, 2, 4, "0:40"),
    # Big GPUs mostly idle: what the duty cycle and waste are for.
    Pattern("research", "rita", "batch", "bf16-large", "h100-80gb", 8, 6, 0.6, 24, "0:25"),
    Pattern("research", "raj", "batch", "min-40gb", "a100-80gb", 4, 5, 1, 24, "0:50"),
]
FAILED_SHARE = 0.04
PREEMPTED_SHARE = 0.06  # of batch and training jobs


@dataclass
class PodRun:
    job: Job
    pod: PodFacts
    end: datetime  # when the cluster reports it ended (it is synced after)
    late: bool = False


@dataclass
class History:
    """What was seeded, for the command's output and the tests."""

    months: list[date] = field(default_factory=list)
    jobs: int = 0
    pods: int = 0
    late_pod: str = ""
    rate_change: datetime | None = None


def history_months(now: datetime) -> list[date]:
    """The ``HISTORY_MONTHS`` whole months before ``now``'s, oldest first."""
    months = [now.date().replace(day=1)]
    for _ in range(HISTORY_MONTHS):
        months.insert(0, (month_start(months[0]) - timedelta(days=1)).date().replace(day=1))
    return months[:-1]


def node_objects(path: Path) -> list[dict[str, Any]]:
    """The nodes of a simulated-cluster file (docs/simulated-cluster.md) as the Kubernetes API
    returns Node objects: labels, annotations, allocatable, capacity, taints and conditions of
    the defaults, the group and the node merged in that order."""
    data = yaml.safe_load(path.read_text())
    defaults = data.get("node_defaults") or {}
    nodes = []
    for group in data.get("node_groups") or []:
        for member in group.get("nodes") or []:
            layers = [defaults, group, member]

            def merged(key: str, layers: list[dict[str, Any]] = layers) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for layer in layers:
                    out.update(layer.get(key) or {})
                return out

            def last(key: str, layers: list[dict[str, Any]] = layers) -> Any:
                found = None
                for layer in layers:
                    if key in layer:
                        found = layer[key]
                return found

            nodes.append(
                {
                    "metadata": {
                        "name": member["name"],
                        "labels": {k: str(v) for k, v in merged("labels").items()},
                        "annotations": {k: str(v) for k, v in merged("annotations").items()},
                    },
                    "spec": {
                        "taints": last("taints") or [],
                        "unschedulable": bool(last("unschedulable")),
                    },
                    "status": {
                        "allocatable": merged("allocatable"),
                        "capacity": merged("capacity"),
                        "conditions": last("conditions") or [{"type": "Ready", "status": "True"}],
                    },
                }
            )
    return nodes


def seed_history(*, now: datetime, cluster_file: Path) -> History:
    """Seed the demo's history up to ``now`` (see the module docstring). Does nothing when any
    usage or closed period exists already."""
    history = History()
    if UsageInterval.objects.exists() or Period.objects.exists():
        return history
    rng = random.Random(SEED)
    months = history_months(now)
    start = month_start(months[0])
    history.months = months
    history.rate_change = _rate_change(months[1].replace(day=15))
    nodes = [node_facts(raw, conventions()) for raw in node_objects(cluster_file)]
    nodes_sync(ClusterView(nodes=nodes, pods=[], jobs={}), now=start)
    runs = _runs(rng, start=start, until=now - timedelta(minutes=30), nodes=nodes)
    history.jobs = len({r.job.pk for r in runs})
    history.pods = len(runs)
    # One pod of the first month reported only after that month was closed.
    first_close = _close_time(months[0], now)
    late = next(
        r for r in reversed(runs) if r.end < month_end(months[0]) and r.job.gpus_per_pod >= 4
    )
    late.late = True
    history.late_pod = late.pod.name
    closes = [(_close_time(m, now), m) for m in months]
    _replay(runs, closes=closes, late_at=first_close + timedelta(days=2), now=now, nodes=nodes)
    return history


def _close_time(month: date, now: datetime) -> datetime:
    """When the scheduled close would have closed ``month``: 72 hours into the next month (or
    just before ``now`` when that is sooner)."""
    return min(month_end(month) + timedelta(hours=72), now - timedelta(minutes=10))


def _rate_change(day: date) -> datetime:
    """A new rate card from ``day``: the newest card's weights, its price × the factor; through
    the policy's own writer."""
    cards = policy_current()["rate_cards"]
    newest = cards[max(cards, key=lambda k: cards[k]["effective_from"])]
    at = datetime(day.year, day.month, day.day, tzinfo=UTC)
    if newest["effective_from"] >= at:
        return newest["effective_from"]
    price = (newest["price_per_normalized_gpu_hour"] * RATE_CHANGE_FACTOR).quantize(Decimal("0.01"))
    card = {
        "effective_from": at,
        "currency": newest["currency"],
        "price_per_normalized_gpu_hour": price,
        "note": "Power prices rose: +10 %.",
        "weights": newest["weights"],
    }
    policy_edit(sections={"rate_cards": {**cards, "new": card}})
    return at


def _runs(
    rng: random.Random, *, start: datetime, until: datetime, nodes: Iterable[Any]
) -> list[PodRun]:
    """The jobs of every day from ``start`` to ``until`` (each finished by ``until``), created
    with their timelines; their pods, in the order they end."""
    users = {u.get_username(): u for u in get_user_model().objects.all()}
    teams = {t.name: t for t in Team.objects.all()}
    queues = {q.name: q for q in Queue.objects.all()}
    capabilities = {c.name: c for c in CapabilityClass.objects.all()}
    classes = {g.name: g for g in GpuClass.objects.all()}
    by_product = {g.product: g.name for g in classes.values()}
    hosts: dict[tuple[str, bool], list[str]] = {}
    for facts in nodes:
        name = by_product.get(facts.product)
        if name and facts.healthy and not facts.maintenance:
            hosts.setdefault((name, bool(facts.mig_layout)), []).append(facts.name)
    planned: list[tuple[Pattern, datetime, timedelta, str]] = []
    day = start
    while day < until:
        for pattern in PATTERNS:
            for _ in range(_poisson(rng, pattern.per_day)):
                begin = day + timedelta(seconds=rng.uniform(0, 86_400))
                limit = timedelta(hours=pattern.limit_hours)
                hours = pattern.hours * rng.lognormvariate(0, 0.45)
                runtime = min(max(timedelta(hours=hours), timedelta(minutes=5)), limit * 0.97)
                fate = rng.random()
                outcome = (
                    "failed"
                    if fate < FAILED_SHARE
                    else "preempted"
                    if fate < FAILED_SHARE + PREEMPTED_SHARE
                    and pattern.queue in ("batch", "training")
                    else "succeeded"
                )
                planned.append((pattern, begin, runtime, outcome))
        day += timedelta(days=1)
    jobs: list[Job] = []
    plans: list[tuple[Pattern, datetime, timedelta, str, list[tuple[datetime, datetime]]]] = []
    drained: set[int] = set()
    for pattern, begin, runtime, outcome in planned:
        segments = [(begin, begin + runtime)]
        if outcome == "preempted":
            # Stopped part-way, back in the queue, run again to its end.
            stop = begin + runtime * rng.uniform(0.2, 0.7)
            wait = timedelta(minutes=rng.uniform(10, 120))
            segments = [(begin, stop), (stop + wait, stop + wait + (begin + runtime - stop))]
        if outcome == "failed":
            segments = [(begin, begin + runtime * rng.uniform(0.05, 0.5))]
        if segments[-1][1] + timedelta(minutes=15) > until:
            continue  # would still be running: the live demo's jobs are the running ones
        plans.append((pattern, begin, runtime, outcome, segments))
    for pattern, begin, _runtime, outcome, segments in plans:
        queue = queues[pattern.queue]
        jobs.append(
            Job(
                owner=users[pattern.user],
                team=teams[pattern.team],
                queue=queue,
                capability_class=capabilities[pattern.capability],
                name=f"{pattern.queue}-{pattern.capability}",
                pods=pattern.pods,
                gpus_per_pod=pattern.gpus,
                mig_profile=pattern.mig_profile,
                image=IMAGE,
                command=["python", "train.py"],
                env={"SIM_GPU_UTILIZATION": pattern.utilization},
                runtime_limit=timedelta(hours=pattern.limit_hours),
                checkpoint_interval=queue.checkpoint_interval,
                state=JobState.FAILED if outcome == "failed" else JobState.SUCCEEDED,
                gpu_class=classes[pattern.gpu_class],
                submitted_at=begin - timedelta(minutes=rng.uniform(0.5, 20)),
                admitted_at=begin - timedelta(seconds=20),
                started_at=segments[-1][0],
                finished_at=segments[-1][1],
                attempts=len(segments),
                exit_code=1 if outcome == "failed" else 0,
                failure_reason="exit code 1" if outcome == "failed" else "",
            )
        )
    with transaction.atomic():
        created = Job.objects.bulk_create(jobs)
    events: list[JobEvent] = []
    runs: list[PodRun] = []
    for job, (pattern, _begin, _runtime, outcome, segments) in zip(created, plans, strict=True):
        job.k8s_job_name = f"gp-{job.pk}"
        events.append(JobEvent(job=job, at=job.submitted_at, kind=EventKind.SUBMITTED))
        key = (pattern.gpu_class, bool(pattern.mig_profile))
        choices = hosts.get(key) or hosts.get((pattern.gpu_class, False)) or ["unknown"]
        for attempt, (lo, hi) in enumerate(segments):
            node = choices[rng.randrange(len(choices))]
            events.append(JobEvent(job=job, at=lo, kind=EventKind.STARTED, message=f"on {node}"))
            stopping = attempt < len(segments) - 1
            grace = queues[pattern.queue].termination_grace
            release = hi + (grace if stopping else timedelta(0))
            if stopping:
                drain = pattern.queue == "training" and not drained.intersection({lo.month})
                if drain:
                    drained.add(lo.month)
                checkpoint = job.checkpoint_interval
                if checkpoint and hi - lo > checkpoint and rng.random() < 0.7:
                    saved = lo + checkpoint * int((hi - lo) / checkpoint)
                    events.append(JobEvent(job=job, at=saved, kind=EventKind.CHECKPOINT))
                events.append(
                    JobEvent(
                        job=job,
                        at=hi,
                        kind=EventKind.PREEMPTED,
                        message=f"node {node} is drained for maintenance"
                        if drain
                        else "preempted for a higher-priority job",
                        details={"maintenance_nodes": [node]} if drain else {},
                    )
                )
                events.append(JobEvent(job=job, at=release, kind=EventKind.REQUEUED))
            for index in range(pattern.pods):
                name = f"{job.k8s_job_name}-{index}-{attempt}"
                runs.append(
                    PodRun(
                        job=job,
                        end=release,
                        pod=PodFacts(
                            name=name,
                            namespace=job.team.namespace,
                            uid=str(uuid.UUID(int=rng.getrandbits(128))),
                            node=node,
                            phase="Failed" if outcome == "failed" else "Succeeded",
                            job_id=job.pk,
                            index=index,
                            devices={pattern.mig_profile or "gpu": pattern.gpus},
                            grace_seconds=int(grace.total_seconds()),
                            container=ContainerOutcome(
                                started_at=lo,
                                finished_at=release,
                                exit_code=1 if outcome == "failed" else 0,
                                reason="Error" if outcome == "failed" else "Completed",
                            ),
                        ),
                    )
                )
        assert job.finished_at is not None
        events.append(
            JobEvent(
                job=job,
                at=job.finished_at,
                kind=EventKind.FAILED if outcome == "failed" else EventKind.SUCCEEDED,
                message="exit code 1" if outcome == "failed" else "completed",
            )
        )
    Job.objects.bulk_update(created, ["k8s_job_name"], batch_size=500)
    JobEvent.objects.bulk_create(events, batch_size=1000)
    return sorted(runs, key=lambda r: (r.end, r.pod.name))


def _replay(
    runs: list[PodRun],
    *,
    closes: list[tuple[datetime, date]],
    late_at: datetime,
    now: datetime,
    nodes: list[Any],
) -> None:
    """Hand the pods to the usage pass a day at a time, as the reconcile would have seen them
    end, and close each month at its close time; the late pod comes in at ``late_at``."""
    pending = [r for r in runs if not r.late]
    late = [r for r in runs if r.late]
    first = min(r.end for r in runs)
    midnight = datetime.combine(first.date() + timedelta(days=1), time(0), tzinfo=UTC)
    days = {midnight + timedelta(days=n) for n in range((now - midnight).days + 1)}
    moments = sorted({min(at, now) for at in days | {at for at, _ in closes} | {late_at}})
    for moment in moments:
        batch = [r for r in pending if r.end <= moment]
        pending = [r for r in pending if r.end > moment]
        if moment >= late_at and late:
            batch += late
            late = []
        if batch:
            usage_sync(
                ClusterView(nodes=nodes, pods=[r.pod for r in batch], jobs={}),
                now=moment,
                report=CycleReport(),
            )
        for at, month in closes:
            if at == moment:
                period_close(month=month, by=None, now=at)
    if pending or late:
        usage_sync(
            ClusterView(nodes=nodes, pods=[r.pod for r in pending + late], jobs={}),
            now=now,
            report=CycleReport(),
        )


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth; the means here are small)."""
    limit, k, p = 2.718281828459045 ** (-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
