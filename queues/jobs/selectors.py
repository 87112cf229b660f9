"""Reads of jobs: who sees which, their logs and their cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet

from portal.roles import is_admin
from queues.cluster.adapter import Cluster, cluster_from_settings
from queues.models import (
    GPU_HOLDING_STATES,
    Job,
    JobState,
    Node,
    RateCard,
    RateCardWeight,
    Team,
    UsageInterval,
)
from queues.rates import cost_per_hour, rate_interval, round_hours, round_money


def jobs_visible_to(user: User) -> QuerySet[Job]:
    """Jobs of the user's teams, and the jobs they submitted to a team they have left since
    (admins: every job). Anything else is "not found", not "forbidden": a job's existence is
    itself team business."""
    jobs = Job.objects.select_related("owner", "team", "queue", "capability_class", "gpu_class")
    if is_admin(user):
        return jobs
    return jobs.filter(Q(team__in=Team.objects.filter(members=user)) | Q(owner=user))


def job_for(user: User, job_id: int) -> Job | None:
    """The job if the user may see it, else None."""
    return jobs_visible_to(user).filter(pk=job_id).first()


def may_cancel(user: User, job: Job) -> bool:
    """Only the job's owner or an admin may cancel it."""
    return is_admin(user) or job.owner_id == user.pk


@dataclass(frozen=True)
class PodLog:
    """The last lines of one pod's log (empty before the container starts or after it is gone)."""

    pod: str
    node: str
    phase: str
    lines: list[str]

    @property
    def text(self) -> str:
        """The lines as the page shows them (a template tag cannot hold a line break)."""
        return "\n".join(self.lines)


def job_pod_logs(job: Job, *, tail_lines: int = 50, cluster: Cluster | None = None) -> list[PodLog]:
    """The last ``tail_lines`` lines of each of the job's pods, pods by name.

    A job that never reached the cluster (no Kubernetes Job name) has none, and the cluster is
    not asked. Otherwise one list request plus one log request per pod, on ``cluster`` or on the
    one the settings name (connected and closed here). Raises ``ClusterUnreachable`` when the
    cluster does not answer or cannot be configured."""
    if not job.k8s_job_name:
        return []
    if cluster is None:
        connected = cluster_from_settings()
        try:
            return job_pod_logs(job, tail_lines=tail_lines, cluster=connected)
        finally:
            connected.close()
    namespace = job.team.namespace
    pods = sorted(cluster.pods_of_job(namespace, job.pk), key=lambda p: p["metadata"]["name"])
    logs = []
    for pod in pods:
        name = pod["metadata"]["name"]
        text = cluster.pod_log(namespace, name, tail_lines=tail_lines)
        logs.append(
            PodLog(
                pod=name,
                node=(pod.get("spec") or {}).get("nodeName") or "",
                phase=(pod.get("status") or {}).get("phase") or "",
                lines=text.splitlines()[-tail_lines:] if text else [],
            )
        )
    return logs


@dataclass(frozen=True)
class HourlyCost:
    amount: Decimal
    currency: str
    weight: Decimal
    price_per_normalized_gpu_hour: Decimal


def hourly_cost(
    *, gpu_class: str, gpu_equivalents: Fraction | Decimal | int, at: datetime
) -> HourlyCost | None:
    """Cost per hour of holding ``gpu_equivalents`` of ``gpu_class`` under the card in force at
    ``at``; None when no card is in force or it does not weigh the class."""
    card = RateCard.objects.in_force(at)
    if card is None:
        return None
    weight = (
        RateCardWeight.objects.filter(rate_card=card, gpu_class__name=gpu_class)
        .values_list("weight", flat=True)
        .first()
    )
    if weight is None:
        return None
    return HourlyCost(
        amount=cost_per_hour(
            gpu_equivalents=gpu_equivalents,
            weight=weight,
            price=card.price_per_normalized_gpu_hour,
        ),
        currency=card.currency,
        weight=weight,
        price_per_normalized_gpu_hour=card.price_per_normalized_gpu_hour,
    )


@dataclass(frozen=True)
class CostSoFar:
    amount: Decimal
    normalized_gpu_hours: Decimal
    currency: str
    running: bool  # some of its pods still hold GPUs


def job_cost_so_far(job: Any, *, now: datetime) -> CostSoFar | None:
    """What a job's usage intervals have cost up to ``now`` (open ones count until now), by the
    statements' rule (queues.rates.rate_interval: each interval split at every rate-card change,
    exact until the total, which is rounded once, half up); None before it held any GPU, or when
    some of its use falls under no card or a card that does not weigh its class."""
    intervals = list(UsageInterval.objects.filter(job=job).select_related("gpu_class"))
    if not intervals:
        return None
    cards = RateCard.objects.all().terms()
    cost = Fraction(0)
    normalized = Fraction(0)
    currencies = set()
    for interval in intervals:
        for part in rate_interval(
            start=interval.started_at,
            end=max(interval.ended_at or now, interval.started_at),
            devices=interval.devices,
            share=interval.share,
            gpu_class=interval.gpu_class.name,
            cards=cards,
        ):
            if part.cost is None or part.normalized_gpu_hours is None:
                return None
            cost += part.cost
            normalized += part.normalized_gpu_hours
            currencies.add(part.currency)
    if len(currencies) != 1:
        return None  # nothing held yet, or cards in different currencies: no one sum
    return CostSoFar(
        amount=round_money(cost),
        normalized_gpu_hours=round_hours(normalized),
        currency=currencies.pop(),
        running=any(i.ended_at is None for i in intervals),
    )


@dataclass(frozen=True)
class Progress:
    """How much of its runtime limit the job's current (or last) run has used."""

    elapsed: timedelta
    limit: timedelta
    running: bool
    started_at: datetime

    @property
    def percent(self) -> int:
        return min(100, int(self.elapsed / self.limit * 100)) if self.limit else 100

    @property
    def deadline(self) -> datetime:
        return self.started_at + self.limit


def job_progress(job: Job, *, now: datetime) -> Progress | None:
    """Elapsed time of the job's run against its runtime limit: from when it started to now
    (running) or to when it finished; None before it started."""
    if job.started_at is None or not job.runtime_limit:
        return None
    end = job.finished_at if job.finished_at and job.finished_at >= job.started_at else now
    running = job.state == JobState.RUNNING
    if not running and job.finished_at is None:
        return None
    elapsed = max(end - job.started_at, timedelta(0))
    return Progress(
        elapsed=timedelta(seconds=int(elapsed.total_seconds())),
        limit=job.runtime_limit,
        running=running,
        started_at=job.started_at,
    )


@dataclass(frozen=True)
class DrainNotice:
    """A running job's nodes are being drained: when it will be stopped, and why."""

    nodes: list[str]
    reason: str
    deadline: datetime | None  # the earliest of its drained nodes' deadlines (None: none set)
    limit_ends: datetime | None

    @property
    def stopped(self) -> bool:
        """Whether the deadline comes before the job's own runtime limit ends."""
        return self.deadline is not None and (
            self.limit_ends is None or self.limit_ends > self.deadline
        )


def job_drain_notice(job: Job) -> DrainNotice | None:
    """What the owner must know ahead of a drain's deadline (None: the job's nodes are in
    service, or it does not hold any)."""
    if job.state not in GPU_HOLDING_STATES or job.terminating or not job.nodes:
        return None
    drained = list(
        Node.objects.filter(name__in=set(job.nodes))
        .exclude(maintenance="")
        .order_by("name")
        .values_list("name", "maintenance_reason", "maintenance_deadline")
    )
    if not drained:
        return None
    deadlines = [d for _, _, d in drained if d is not None]
    return DrainNotice(
        nodes=[name for name, _, _ in drained],
        reason="; ".join(sorted({r for _, r, _ in drained if r})),
        deadline=min(deadlines) if deadlines else None,
        limit_ends=job.started_at + job.runtime_limit if job.started_at else None,
    )
