"""On-demand what-ifs for one job's detail page: would another queue or capability class start
it sooner?

Each alternative costs a full plan, so this is not part of the per-cycle ``plan``; the portal
calls it when someone opens a job.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queues.admission.engine import plan
from queues.admission.plan import PendingStatus
from queues.admission.snapshot import JobId, Snapshot


@dataclass(frozen=True, slots=True)
class Alternative:
    """Submitting the job to ``queue`` with ``capability`` would start it at ``starts_at``
    (``admitted_now``: this very cycle)."""

    queue: str
    capability: str
    starts_at: datetime
    admitted_now: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "capability": self.capability,
            "starts_at": self.starts_at.isoformat(),
            "admitted_now": self.admitted_now,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """A pending job's status plus the alternatives that would start it sooner, soonest first."""

    status: PendingStatus | None
    alternatives: tuple[Alternative, ...]
    untried: int = 0  # what-ifs left out because ``max_trials`` was reached

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.to_dict() if self.status else None,
            "alternatives": [a.to_dict() for a in self.alternatives],
            "untried": self.untried,
        }


def explain(snapshot: Snapshot, job_id: JobId, *, max_trials: int | None = None) -> Explanation:
    """Re-plan ``snapshot`` with ``job_id`` moved to every other queue its team may use and every
    capability class that queue accepts; keep those that start it sooner than now estimated.

    Each what-if is a full plan: ``max_trials`` bounds how many are tried (by queue name, then
    capability class); ``untried`` says how many were left out. Raises ``KeyError`` if
    ``job_id`` is not pending in ``snapshot``."""
    job = next((p for p in snapshot.pending if p.id == job_id), None)
    if job is None:
        raise KeyError(job_id)
    # probes change nothing for real jobs, and each what-if below is a full plan: leave them out
    snapshot = dataclasses.replace(snapshot, probes=())
    current = plan(snapshot).status(job_id)
    if current is None:
        return Explanation(status=None, alternatives=())
    baseline = current.estimated_start.at
    trials = [
        (queue.name, capability)
        for queue in sorted(snapshot.queues, key=lambda q: q.name)
        if not queue.teams or job.team in queue.teams
        for capability in sorted(
            queue.capability_classes or tuple(c.name for c in snapshot.capability_classes)
        )
        if (queue.name, capability) != (job.queue, job.capability)
    ]
    untried = 0 if max_trials is None else max(0, len(trials) - max_trials)
    found: list[Alternative] = []
    for queue_name, capability in trials[: len(trials) - untried]:
        moved = dataclasses.replace(job, queue=queue_name, capability=capability)
        trial = dataclasses.replace(
            snapshot,
            pending=tuple(moved if p.id == job_id else p for p in snapshot.pending),
        )
        result = plan(trial)
        if result.admission(job_id) is not None:
            found.append(Alternative(queue_name, capability, snapshot.now, True))
            continue
        status = result.status(job_id)
        start = status.estimated_start.at if status else None
        if start is not None and (baseline is None or start < baseline):
            found.append(Alternative(queue_name, capability, start, False))
    found.sort(key=lambda a: (a.starts_at, a.queue, a.capability))
    return Explanation(status=current, alternatives=tuple(found), untried=untried)
