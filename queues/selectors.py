"""Every read the pages, the API and the commands need, with their query counts in mind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F, Prefetch, Q, QuerySet

from chargeback.models import RateCard, RateCardWeight
from portal.roles import is_admin
from queues.admission.capability import Resolution
from queues.models import (
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    Job,
    JobState,
    Queue,
    Reservation,
    Team,
)
from queues.policy import Policy


def policy_current() -> Policy:
    """The active policy in the database, normalized exactly as ``parse_policy`` normalizes a file.

    Inactive (pruned but still referenced) objects are left out; every rate card is in, since
    rate cards are never removed.
    """
    policy: Policy = {}
    settings_row = FairShareSettings.objects.filter(pk=1).first()
    if settings_row is not None:
        policy["fair_share"] = {"usage_half_life": settings_row.usage_half_life}
    policy["gpu_classes"] = {
        g.name: {
            "product": g.product,
            "description": g.description,
            "hbm_gb": g.hbm_gb,
            "precisions": list(g.precisions),
            "mig_profiles": dict(sorted(g.mig_profiles.items())),
            "rdma": g.rdma,
            "tier": g.tier,
        }
        for g in GpuClass.objects.active().order_by("name")
    }
    policy["capability_classes"] = {
        c.name: {
            "description": c.description,
            "min_hbm_gb": c.min_hbm_gb,
            "precisions": list(c.precisions),
            "mig_profile": c.mig_profile,
            "rdma": c.rdma,
            "min_tier": c.min_tier,
        }
        for c in CapabilityClass.objects.active().order_by("name")
    }
    teams = Team.objects.active().order_by("name").prefetch_related("members", "quotas__gpu_class")
    policy["teams"] = {
        t.name: {
            "description": t.description,
            "namespace": t.namespace,
            "cost_center": t.cost_center,
            "fair_share_weight": t.fair_share_weight,
            "members": sorted(u.username for u in t.members.all()),
            "quotas": {
                q.gpu_class.name: {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit}
                for q in sorted(t.quotas.all(), key=lambda q: q.gpu_class.name)
            },
        }
        for t in teams
    }
    queues = (
        Queue.objects.active()
        .order_by("name")
        .prefetch_related("allowed_gpu_classes", "allowed_capability_classes", "teams")
    )
    policy["queues"] = {q.name: queue_policy_fields(q) for q in queues}
    policy["reservations"] = {
        r.name: {
            "team": r.team.name,
            "queue": r.queue.name if r.queue else None,
            "gpu_class": r.gpu_class.name,
            "amount": r.amount,
            "starts_at": r.starts_at,
            "ends_at": r.ends_at,
        }
        for r in Reservation.objects.active()
        .order_by("name")
        .select_related("team", "queue", "gpu_class")
    }
    cards = RateCard.objects.order_by("effective_from").prefetch_related(
        Prefetch("weights", queryset=RateCardWeight.objects.select_related("gpu_class"))
    )
    policy["rate_cards"] = {
        rate_card_key(card): {
            "effective_from": card.effective_from,
            "currency": card.currency,
            "price_per_normalized_gpu_hour": card.price_per_normalized_gpu_hour,
            "note": card.note,
            "weights": {
                w.gpu_class.name: w.weight
                for w in sorted(card.weights.all(), key=lambda w: w.gpu_class.name)
            },
        }
        for card in cards
    }
    return policy


def rate_card_key(card: RateCard) -> str:
    from queues.policy import format_datetime

    return format_datetime(card.effective_from)


def queue_policy_fields(queue: Queue) -> dict[str, Any]:
    """A queue's terms as the policy file spells them (M2M relations must be prefetched)."""
    return {
        "description": queue.description,
        "priority": queue.priority,
        "expected_wait_target": queue.expected_wait_target,
        "max_runtime": queue.max_runtime,
        "default_runtime": queue.default_runtime,
        "preemption_class": queue.preemption_class,
        "grace_period": queue.grace_period,
        "sharing_mode": queue.sharing_mode,
        "allowed_gpu_classes": sorted(g.name for g in queue.allowed_gpu_classes.all()),
        "allowed_capability_classes": sorted(
            c.name for c in queue.allowed_capability_classes.all()
        ),
        "checkpoint_interval": queue.checkpoint_interval,
        "max_gpus_per_job": queue.max_gpus_per_job,
        "max_running_jobs_per_user": queue.max_running_jobs_per_user,
        "max_gpus_per_user": queue.max_gpus_per_user,
        "job_priority": {
            "min": queue.min_job_priority,
            "default": queue.default_job_priority,
            "max": queue.max_job_priority,
        },
        "teams": sorted(t.name for t in queue.teams.all()),
        "may_borrow": queue.may_borrow,
        "reservation_only": queue.reservation_only,
        "required_topology": queue.required_topology,
    }


# --- The queue catalog ---------------------------------------------------------------------------


def queues_visible_to(user: Any) -> QuerySet[Queue]:
    """Active queues the user may submit to (through a team); admins see every active queue.

    The queryset prefetches what the catalog shows, so listing costs a fixed number of queries.
    """
    queues = Queue.objects.active().prefetch_related(
        Prefetch("allowed_gpu_classes", queryset=GpuClass.objects.order_by("tier", "name")),
        Prefetch("allowed_capability_classes", queryset=CapabilityClass.objects.order_by("name")),
        Prefetch("teams", queryset=Team.objects.order_by("name")),
    )
    if is_admin(user):
        return queues
    return queues.filter(Q(teams__members=user) & Q(teams__active=True)).distinct()


def teams_of(user: Any) -> QuerySet[Team]:
    return Team.objects.active().filter(members=user).order_by("name")


@dataclass(frozen=True)
class CapabilityResolution:
    capability_class: CapabilityClass
    resolution: Resolution


def capability_classes_resolved(
    capability_classes: QuerySet[CapabilityClass] | None = None,
) -> list[CapabilityResolution]:
    """Each capability class with the active GPU classes it resolves to and why not the others."""
    gpu_classes = list(GpuClass.objects.active().order_by("tier", "name"))
    classes = (
        capability_classes if capability_classes is not None else CapabilityClass.objects.active()
    )
    return [CapabilityResolution(c, c.resolve(gpu_classes)) for c in classes]


# --- Jobs ----------------------------------------------------------------------------------------


def jobs_visible_to(user: Any) -> QuerySet[Job]:
    """Jobs of the user's teams (admins: every job). Anything else is "not found", not
    "forbidden": a job's existence is itself team business."""
    jobs = Job.objects.select_related("owner", "team", "queue", "capability_class", "gpu_class")
    if is_admin(user):
        return jobs
    return jobs.filter(team__members=user)


def job_for(user: Any, job_id: int) -> Job | None:
    """The job if the user may see it, else None."""
    return jobs_visible_to(user).filter(pk=job_id).first()


def may_cancel(user: Any, job: Job) -> bool:
    """Only the job's owner or an admin may cancel it."""
    return is_admin(user) or job.owner_id == user.pk


@dataclass(frozen=True)
class QueueEntry:
    """One pending job in a queue's plan order, as anyone who may see the queue sees it: other
    teams' jobs show their shape and reason, not their names, commands or images."""

    position: int | None
    job: Job
    mine: bool

    @property
    def label(self) -> str:
        return (self.job.name or f"job {self.job.pk}") if self.mine else "another team's job"


def queue_pending(queue: Queue, user: Any) -> list[QueueEntry]:
    """The queue's pending jobs in plan order (position), those of the user's teams named."""
    teams = set(Team.objects.filter(members=user).values_list("pk", flat=True))
    pending = (
        Job.objects.filter(queue=queue, state=JobState.PENDING)
        .select_related("team", "capability_class")
        .order_by(F("position").asc(nulls_last=True), "submitted_at", "id")
    )
    return [QueueEntry(j.position, j, is_admin(user) or j.team_id in teams) for j in pending]
