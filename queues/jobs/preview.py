"""The submit preview: a dry run of one request through the same engine, nothing saved."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from queues import admission as engine
from queues.jobs.requests import (
    JobRequest,
    RequestLookups,
    job_request_errors,
    pending_cap_errors,
)
from queues.jobs.selectors import hourly_cost
from queues.models import CapabilityClass, Job, JobState, Queue
from queues.reconcile.snapshot import snapshot_build

PREVIEW_JOB_ID = 0  # no stored job has id 0


@dataclass(frozen=True)
class Priced:
    """A "would start sooner" suggestion with what it would cost per hour (None: unknown)."""

    alternative: engine.Alternative
    cost_per_hour: Decimal | None
    currency: str


@dataclass(frozen=True)
class Preview:
    """What would happen to a request submitted now."""

    errors: dict[str, list[str]]
    starts_now: bool = False
    gpu_class: str = ""
    capacity: str = ""
    estimated_start: datetime | None = None  # at the latest, as the job page says
    likely_start: datetime | None = None
    start_range_low: datetime | None = None
    start_range_high: datetime | None = None
    why_unknown: str = ""
    estimated_start_note: str = ""  # beside a start: that it is projected (``EstimatedStart``)
    reasons: tuple[engine.PendingReason, ...] = ()
    alternatives: tuple[engine.Alternative, ...] = ()
    alternatives_untried: int = 0
    cost_per_hour: Decimal | None = None
    currency: str = ""
    preempts_own: tuple[int, ...] = ()  # the submitter's own running jobs it would preempt
    priced: tuple[Priced, ...] = ()  # the alternatives with their cost per hour

    @property
    def binding(self) -> engine.PendingReason | None:
        return self.reasons[0] if self.reasons else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "errors": self.errors,
            "starts_now": self.starts_now,
            "gpu_class": self.gpu_class or None,
            "capacity": self.capacity or None,
            "estimated_start": self.estimated_start.isoformat() if self.estimated_start else None,
            **{
                key: value.isoformat() if value else None
                for key, value in (
                    ("likely_start", self.likely_start),
                    ("start_range_low", self.start_range_low),
                    ("start_range_high", self.start_range_high),
                )
            },
            "why_unknown": self.why_unknown,
            "estimated_start_note": self.estimated_start_note,
            "reasons": [r.to_dict() for r in self.reasons],
            "alternatives": [
                {
                    **p.alternative.to_dict(),
                    "cost_per_hour": None if p.cost_per_hour is None else str(p.cost_per_hour),
                    "currency": p.currency or None,
                }
                for p in self.priced
            ]
            or [a.to_dict() for a in self.alternatives],
            "alternatives_untried": self.alternatives_untried,
            "cost_per_hour": str(self.cost_per_hour) if self.cost_per_hour is not None else None,
            "currency": self.currency or None,
            "preempts_own": list(self.preempts_own),
        }


def job_preview(*, request: JobRequest, now: datetime | None = None) -> Preview:
    """Would ``request`` start now, or when, on which GPU class, why it would wait, what would
    start it sooner, and what it costs per hour. Invalid requests (the pending-job caps
    included) return their errors only.

    Its cost: one plan of the cluster with every pending job (at most
    ``MAX_PENDING_JOBS_PER_QUEUE`` per queue) plus one per alternative tried (at most
    ``MAX_ALTERNATIVES_TRIED``)."""
    errors = job_request_errors(request) or pending_cap_errors([request]).get(0, {})
    if errors:
        return Preview(errors=errors)
    now = now or timezone.now()
    probe = engine.PendingJob(
        id=PREVIEW_JOB_ID,
        queue=request.queue.name,
        team=request.team.name,
        user=request.owner.get_username(),
        capability=request.capability_class.name,
        submitted_at=now,
        pods=request.pods,
        gpus_per_pod=request.gpus_per_pod,
        memory_gb=request.declared_gpu_memory_gb,
        runtime_limit=request.runtime,
        priority=request.job_priority,
        cpu_millicores=request.cpu_millicores_per_pod,
        memory_mib=request.memory_mib_per_pod,
    )
    snapshot = snapshot_build(now=now)
    snapshot = dataclasses.replace(snapshot, pending=(*snapshot.pending, probe))
    plan = engine.plan(snapshot)
    admission = plan.admission(PREVIEW_JOB_ID)
    status = plan.status(PREVIEW_JOB_ID)
    victims = {p.job_id for p in plan.preemptions if p.for_job == PREVIEW_JOB_ID}
    victims |= set(status.preempting if status else ())
    own = tuple(sorted(r.id for r in snapshot.running if r.id in victims and r.user == probe.user))
    if admission is not None:
        cost = hourly_cost(gpu_class=admission.gpu_class, gpu_equivalents=admission.gpu_eq, at=now)
        return Preview(
            errors={},
            starts_now=True,
            gpu_class=admission.gpu_class,
            capacity=admission.capacity.value,
            estimated_start=now,
            cost_per_hour=cost.amount if cost else None,
            currency=cost.currency if cost else "",
            preempts_own=own,
        )
    explanation = engine.explain(
        snapshot,
        PREVIEW_JOB_ID,
        acceptable=acceptable_for(request),
        max_trials=settings.MAX_ALTERNATIVES_TRIED,
    )
    # The class its estimate starts it on, if it says; else the least valuable one it may use.
    on = (status.estimated_start.gpu_class if status else None) or _cheapest_class(
        request, snapshot
    )
    cost = (
        hourly_cost(gpu_class=on, gpu_equivalents=request.gpu_equivalents, at=now) if on else None
    )
    return Preview(
        errors={},
        gpu_class=on,
        estimated_start=status.estimated_start.at if status else None,
        likely_start=status.estimated_start.likely if status else None,
        start_range_low=status.estimated_start.range_low if status else None,
        start_range_high=status.estimated_start.range_high if status else None,
        why_unknown=status.estimated_start.why_unknown if status else "",
        estimated_start_note=status.estimated_start.note if status else "",
        reasons=status.reasons if status else (),
        alternatives=explanation.alternatives,
        alternatives_untried=explanation.untried,
        cost_per_hour=cost.amount if cost else None,
        currency=cost.currency if cost else "",
        preempts_own=own,
        priced=tuple(_priced(request, a, now) for a in explanation.alternatives),
    )


def _priced(request: JobRequest, alternative: engine.Alternative, now: datetime) -> Priced:
    """What the same job would cost per hour in the alternative's queue and class, on the GPU
    class it would start on."""
    queue = Queue.objects.filter(name=alternative.queue).first()
    capability = CapabilityClass.objects.filter(name=alternative.capability).first()
    if not alternative.gpu_class or queue is None or capability is None:
        return Priced(alternative, None, "")
    moved = dataclasses.replace(request, queue=queue, capability_class=capability)
    cost = hourly_cost(
        gpu_class=alternative.gpu_class, gpu_equivalents=moved.gpu_equivalents, at=now
    )
    return Priced(alternative, cost.amount if cost else None, cost.currency if cost else "")


def _cheapest_class(request: JobRequest, snapshot: engine.Snapshot) -> str:
    """The least valuable GPU class the request resolves to in its queue ("" if none)."""
    allowed = set(request.queue.allowed_gpu_classes.values_list("name", flat=True))
    classes = sorted(
        (g for g in snapshot.gpu_classes if g.name in allowed), key=lambda g: (g.weight, g.name)
    )
    matches = engine.resolve_capability(
        request.capability_class.request(), [g.spec for g in classes]
    )
    return matches.matches[0] if matches.matches else ""


def job_alternatives(*, job: Job, now: datetime | None = None) -> engine.Explanation:
    """Other queues and capability classes that would start a pending job sooner (on demand:
    each is a full plan, at most ``MAX_ALTERNATIVES_TRIED`` of them), each one a submission of
    the same job the portal would accept. No alternatives when the job is not pending or
    nothing would be sooner."""
    if job.state != JobState.PENDING:
        return engine.Explanation(status=None, alternatives=())
    snapshot = snapshot_build(now=now or timezone.now())
    try:
        return engine.explain(
            snapshot,
            job.pk,
            acceptable=acceptable_for(JobRequest.of_job(job)),
            max_trials=settings.MAX_ALTERNATIVES_TRIED,
        )
    except KeyError:
        return engine.Explanation(status=None, alternatives=())


def acceptable_for(request: JobRequest) -> engine.Acceptable:
    """Whether ``request`` moved to another queue and capability class keeps every request rule
    (``job_request_errors``: access, per-job limits, runtime, sharing, what can ever fit): a
    suggestion is only one a person can follow."""
    queues = {q.name: q for q in Queue.objects.active()}
    capabilities = {c.name: c for c in CapabilityClass.objects.active()}
    lookups = RequestLookups()

    def acceptable(queue: str, capability: str) -> bool:
        if queue not in queues or capability not in capabilities:
            return False
        moved = dataclasses.replace(
            request, queue=queues[queue], capability_class=capabilities[capability]
        )
        return not job_request_errors(moved, lookups=lookups)

    return acceptable
