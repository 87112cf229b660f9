"""The admission engine's output: what to admit, what to preempt, and why the rest waits.

Everything a ``Plan`` carries turns into plain JSON values with ``to_dict()`` so the portal can
store reasons in a JSONField and serve them through the API unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from queues.admission.reasons import PendingReason
from queues.admission.snapshot import CapacityKind, JobId, PlannedNodes, ReservationId


def gpu_eq_json(value: Fraction) -> int | float:
    """A GPU-equivalent amount as a JSON number: exact when whole, else 4 decimals."""
    if value.denominator == 1:
        return int(value)
    return round(float(value), 4)


def _time_json(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True, slots=True)
class Admission:
    """Admit ``job_id`` on ``gpu_class`` with its pods on ``nodes`` (one entry per pod).

    ``capacity`` says what entitles it: ``reserved`` carries the reservation it uses;
    ``borrowed`` may carry the reservation whose idle GPUs it runs on (preemptible work only).
    ``backfilled`` marks a job that starts ahead of a blocked job without delaying it.
    ``borrowed_gpu_eq`` is the part of ``gpu_eq`` beyond the team's nominal quota when it is
    admitted: a ``borrowed`` job fills the team's unused nominal room first (the rest of its
    ``gpu_eq`` is within the quota) and is still reclaimable as a whole. 0 for ``nominal`` and
    ``reserved`` jobs.
    """

    job_id: JobId
    gpu_class: str
    nodes: tuple[str, ...]
    gpu_eq: Fraction
    capacity: CapacityKind
    reservation_id: ReservationId | None = None
    backfilled: bool = False
    borrowed_gpu_eq: Fraction = Fraction(0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "gpu_class": self.gpu_class,
            "nodes": list(self.nodes),
            "gpu_eq": gpu_eq_json(self.gpu_eq),
            "capacity": self.capacity.value,
            "reservation_id": self.reservation_id,
            "backfilled": self.backfilled,
            "borrowed_gpu_eq": gpu_eq_json(self.borrowed_gpu_eq),
        }


@dataclass(frozen=True, slots=True)
class Preemption:
    """Preempt running job ``job_id`` with ``grace_period``; it goes back to pending.

    ``for_job`` is the pending job the GPUs are freed for; ``lost_work`` the work since the
    victim's last (real or assumed) checkpoint.
    """

    job_id: JobId
    reason: str
    grace_period: timedelta
    for_job: JobId
    lost_work: timedelta

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "reason": self.reason,
            "grace_period_seconds": int(self.grace_period.total_seconds()),
            "for_job": self.for_job,
            "lost_work_seconds": int(self.lost_work.total_seconds()),
        }


@dataclass(frozen=True, slots=True)
class EstimatedStart:
    """When a pending job should start if nothing new arrives ahead of it (see
    ``forecast.forecast``). ``at`` is the start at the latest: every job runs to its runtime
    limit. ``likely`` the start when jobs run their predicted runtimes, ``range_low``–
    ``range_high`` the interval when they run their 10th–90th percentile runtimes (it holds
    ``likely``; all three never after ``at``). ``at`` None means unknown, and ``why_unknown``
    says why; a job starting now has no ``likely`` or range. ``projected``: found beyond the
    forecast's horizon by the work queued ahead of it, not simulated (``projection``)."""

    at: datetime | None
    why_unknown: str = ""
    range_low: datetime | None = None
    range_high: datetime | None = None
    gpu_class: str | None = None  # the class the simulation starts it on, when it does
    likely: datetime | None = None
    projected: bool = False

    @property
    def note(self) -> str:
        """What a person is told beside the estimate: why it is unknown, or that it is a
        projection."""
        return PROJECTED_NOTE if self.projected and self.at is not None else self.why_unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": _time_json(self.at),
            "likely": _time_json(self.likely),
            "why_unknown": self.why_unknown,
            "range_low": _time_json(self.range_low),
            "range_high": _time_json(self.range_high),
        }


# Beside a projected estimate (``EstimatedStart.projected``).
PROJECTED_NOTE = (
    "projected from the work queued ahead of it: more jobs wait ahead than the forecast "
    "simulates one by one, so this is the rougher estimate"
)


def bound_kept(shown: datetime | None, new: datetime | None, now: datetime) -> datetime | None:
    """ "At the latest" as a member is shown it across plans: never earlier than the bound she
    was shown while that is still ahead. Each plan's bound assumes every job runs to its limit;
    when jobs end early a new plan finds an earlier one, but with backfill an early end can also
    let a gang ahead start sooner and push this job back, past that earlier bound (measured on
    a replay: 28 of 182 jobs were shown a bound that moved earlier and was then broken). The
    bound first shown stays true in those replays, so it is kept; it moves later whenever a
    plan says so, and a new bound replaces one that has passed or a job with no bound."""
    if new is None or shown is None or shown <= now:
        return new
    return max(shown, new)


@dataclass(frozen=True, slots=True)
class PendingStatus:
    """Why one pending job waits (binding reason first), when it should start, and its place in
    its queue (1-based, among the queue's jobs still waiting after this plan)."""

    job_id: JobId
    reasons: tuple[PendingReason, ...]
    estimated_start: EstimatedStart
    position: int
    queue_length: int
    preempting: tuple[JobId, ...] = ()

    @property
    def binding(self) -> PendingReason:
        return self.reasons[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "reasons": [reason.to_dict() for reason in self.reasons],
            "estimated_start": self.estimated_start.to_dict(),
            "position": self.position,
            "queue_length": self.queue_length,
            "preempting": list(self.preempting),
        }


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """Ask node pool ``pool`` for ``nodes`` more nodes: for the waiting jobs ``for_jobs`` that
    fit only on nodes not there yet, and ``warm`` of them to restore queues' warm floors."""

    pool: str
    nodes: int
    for_jobs: tuple[JobId, ...] = ()
    warm: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "nodes": self.nodes,
            "for_jobs": list(self.for_jobs),
            "warm": self.warm,
        }


@dataclass(frozen=True)
class Plan:
    """One admission decision. ``pending`` holds a status for every pending job not admitted,
    in plan order (with ``partial``, only for the jobs the plan was asked to explain);
    ``admitted_reasons`` explains admitted jobs the cluster cannot place; ``probe_estimates``
    the estimated start of every ``Snapshot.probes`` entry, by probe id."""

    now: datetime
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    pending: tuple[PendingStatus, ...]
    admitted_reasons: tuple[tuple[JobId, tuple[PendingReason, ...]], ...] = ()
    probe_estimates: tuple[tuple[JobId, EstimatedStart], ...] = ()
    partial: bool = False
    # Nodes to ask node pools for (``ScaleUp``); None: not decided by this plan (no node pools,
    # or a plan without the forecast, which a scale-up's timing depends on).
    scale_up: tuple[ScaleUp, ...] | None = None
    # Where the pass reserved each blocked job's start (its head-of-queue reservation), by job
    # id: the next snapshot passes it back as ``PendingJob.planned_nodes``.
    planned_nodes: tuple[tuple[JobId, PlannedNodes], ...] = ()
    # The jobs the forecast starts (at the latest) on nodes not there yet, by job id: when, and
    # on which (a node pool's nodes, queues/admission/elastic.py; empty without them).
    landings: tuple[tuple[JobId, datetime, tuple[str, ...]], ...] = ()

    def status(self, job_id: JobId) -> PendingStatus | None:
        """The pending status of ``job_id``, or None if it was admitted or is unknown."""
        for status in self.pending:
            if status.job_id == job_id:
                return status
        return None

    def admission(self, job_id: JobId) -> Admission | None:
        for admission in self.admissions:
            if admission.job_id == job_id:
                return admission
        return None

    def probe_estimate(self, probe_id: JobId) -> EstimatedStart | None:
        """The estimated start of probe ``probe_id``, or None if the snapshot had no such probe."""
        for known, estimate in self.probe_estimates:
            if known == probe_id:
                return estimate
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            "admissions": [a.to_dict() for a in self.admissions],
            "preemptions": [p.to_dict() for p in self.preemptions],
            "pending": [s.to_dict() for s in self.pending],
            "admitted_reasons": [
                {"job_id": job_id, "reasons": [r.to_dict() for r in reasons]}
                for job_id, reasons in self.admitted_reasons
            ],
            "probe_estimates": [
                {"job_id": job_id, "estimated_start": estimate.to_dict()}
                for job_id, estimate in self.probe_estimates
            ],
            "planned_nodes": [
                {"job_id": job_id, **planned.to_dict()} for job_id, planned in self.planned_nodes
            ],
        }
