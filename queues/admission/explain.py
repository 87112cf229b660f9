"""On-demand what-ifs for one job's detail page: would another queue or capability class start
it sooner?

Each alternative costs a full plan, so this is not part of the per-cycle ``plan``; the portal
calls it when someone opens a job.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queues.admission.capability import resolve_capability
from queues.admission.engine import plan
from queues.admission.forecast import WHAT_IF_REPLAY_BUDGET
from queues.admission.plan import PendingStatus
from queues.admission.snapshot import JobId, SharingMode, Snapshot

# Whether the portal would accept the job, as asked, in (queue, capability class): every rule the
# engine does not hold (per-job limits, runtime, access) lives with the request, outside.
Acceptable = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True)
class Alternative:
    """Submitting the job to ``queue`` with ``capability`` would start it at ``starts_at``
    (``admitted_now``: this very cycle)."""

    queue: str
    capability: str
    starts_at: datetime
    admitted_now: bool
    # what the move changes, for people: the queue's preemption class ("never", "graceful",
    # "preemptible") and whether the capability class is the job's own
    preemption: str = ""
    same_queue: bool = False
    same_capability: bool = True
    sharing: str = ""  # the queue's sharing mode, when it differs from the job's own queue's
    gpu_class: str = ""  # the class it would start on ("" when the estimate does not say)

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "capability": self.capability,
            "starts_at": self.starts_at.isoformat(),
            "admitted_now": self.admitted_now,
            "preemption": self.preemption,
            "same_queue": self.same_queue,
            "same_capability": self.same_capability,
            "sharing": self.sharing,
            "gpu_class": self.gpu_class,
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


def explain(
    snapshot: Snapshot,
    job_id: JobId,
    *,
    acceptable: Acceptable | None = None,
    max_trials: int | None = None,
) -> Explanation:
    """Re-plan ``snapshot`` with ``job_id`` moved to every other queue its team may use and every
    capability class that queue accepts; keep those that start it sooner than now estimated, one
    per queue (its soonest; the job's own capability class first among equals), soonest first.

    Only moves that keep the job as asked are tried (``keeps_the_ask``: the same kind of
    devices, on GPUs that meet every requirement of its own capability class) and, when
    ``acceptable`` is given, that the portal would accept as a submission.

    Each what-if is a full plan: ``max_trials`` bounds how many are tried (by queue name, then
    capability class); ``untried`` says how many were left out. Raises ``KeyError`` if
    ``job_id`` is not pending in ``snapshot``."""
    job = next((p for p in snapshot.pending if p.id == job_id), None)
    if job is None:
        raise KeyError(job_id)
    # Every what-if and the baseline they are compared with use the same, smaller forecast.
    current = plan(snapshot, replay_budget=WHAT_IF_REPLAY_BUDGET).status(job_id)
    if current is None:
        return Explanation(status=None, alternatives=())
    baseline = current.estimated_start.at
    queues = {q.name: q for q in snapshot.queues}
    own_sharing = queues[job.queue].sharing
    trials = [
        (queue.name, capability)
        for queue in sorted(snapshot.queues, key=lambda q: q.name)
        if not queue.teams or job.team in queue.teams
        for capability in sorted(
            queue.capability_classes or tuple(c.name for c in snapshot.capability_classes)
        )
        if (queue.name, capability) != (job.queue, job.capability)
        and keeps_the_ask(snapshot, job.queue, job.capability, queue.name, capability)
        and (acceptable is None or acceptable(queue.name, capability))
    ]
    untried = 0 if max_trials is None else max(0, len(trials) - max_trials)
    found: list[Alternative] = []
    for queue_name, capability in trials[: len(trials) - untried]:
        queue = queues[queue_name]
        change = functools.partial(
            Alternative,
            queue_name,
            capability,
            preemption=queue.preemption.value,
            same_queue=queue_name == job.queue,
            same_capability=capability == job.capability,
            sharing="" if queue.sharing is own_sharing else queue.sharing.value,
        )
        moved = dataclasses.replace(job, queue=queue_name, capability=capability)
        trial = dataclasses.replace(
            snapshot,
            pending=tuple(moved if p.id == job_id else p for p in snapshot.pending),
        )
        result = plan(trial, replay_budget=WHAT_IF_REPLAY_BUDGET)
        if (admitted := result.admission(job_id)) is not None:
            found.append(change(snapshot.now, True, gpu_class=admitted.gpu_class))
            continue
        status = result.status(job_id)
        start = status.estimated_start.at if status else None
        if start is not None and (baseline is None or start < baseline):
            assert status is not None
            found.append(change(start, False, gpu_class=status.estimated_start.gpu_class or ""))
    # One per queue: its soonest, the job's own capability class first among equals (a list of
    # every class that would also do says nothing more).
    found.sort(key=lambda a: (a.starts_at, not a.same_capability, a.queue, a.capability))
    best: dict[str, Alternative] = {}
    for alternative in found:
        best.setdefault(alternative.queue, alternative)
    return Explanation(status=current, alternatives=tuple(best.values()), untried=untried)


def keeps_the_ask(
    snapshot: Snapshot, queue: str, capability: str, other_queue: str, other_capability: str
) -> bool:
    """Whether moving a job from (``queue``, ``capability``) to (``other_queue``,
    ``other_capability``) still gives it what it asked for: the same kind of devices (the
    queues share GPUs the same way; the same MIG profile or none) and only GPU classes that meet
    every requirement of its own capability class (a T4 is no answer to an fp8 request)."""
    queues = {q.name: q for q in snapshot.queues}
    capabilities = {c.name: c for c in snapshot.capability_classes}
    if not {queue, other_queue} <= queues.keys() or not {capability, other_capability} <= (
        capabilities.keys()
    ):
        return False
    sharing, other_sharing = queues[queue].sharing, queues[other_queue].sharing
    # a whole GPU for each time-slice asked is more, never less; a share for a whole GPU is less
    if other_sharing is not sharing and (sharing, other_sharing) != (
        SharingMode.TIME_SLICED,
        SharingMode.EXCLUSIVE,
    ):
        return False
    own, other = capabilities[capability], capabilities[other_capability]
    if own.mig_profile != other.mig_profile:
        return False
    allowed = set(queues[other_queue].gpu_classes)
    specs = [g.spec for g in snapshot.gpu_classes if not allowed or g.name in allowed]
    offered = resolve_capability(other, specs).matches
    wanted = set(resolve_capability(own, specs).matches)
    return bool(offered) and set(offered) <= wanted
