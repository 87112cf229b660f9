"""The Job controller's bookkeeping and decisions, as pure functions over :class:`JobRun`.

:class:`~simcluster.cluster.SimCluster` acts on them (creates and deletes pods, records
events); here is only *what* a Job needs: whether it failed or succeeded, which pods it lacks,
and the ``status`` it reports — the way Kubernetes ≥ 1.31's Job controller does it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from simcluster.clock import rfc3339
from simcluster.kubelet import PodRun

BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


@dataclass
class JobRun:
    """The Job controller's own record of one Job (what a real one keeps in finalizers)."""

    uid: str
    namespace: str
    name: str
    pods: set[str] = field(default_factory=set)  # uids of its pods that still exist
    succeeded: set[str] = field(default_factory=set)
    succeeded_indexes: set[int] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    start: datetime | None = None
    failure: tuple[str, str] | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    completion: datetime | None = None
    done: bool = False
    foreground_deletion: bool = False
    next_create_at: datetime | None = None


def replacement_delay(failures: int) -> float:
    """The pod replacement back-off after ``failures`` failures: 10 s, doubling, at most 6 min."""
    return min(10.0 * 2 ** (failures - 1), 360.0)


def job_failure(
    run: JobRun, spec: dict[str, Any], moment: datetime, speed: float
) -> tuple[str, str] | None:
    """(reason, message) when the Job has failed: too many failed pods, or past its deadline."""
    if len(run.failed) > int(spec.get("backoffLimit", 6)):
        return BACKOFF_LIMIT_EXCEEDED
    deadline = spec.get("activeDeadlineSeconds")
    if (
        deadline
        and run.start is not None
        and moment >= run.start + timedelta(seconds=deadline / speed)
    ):
        return DEADLINE_EXCEEDED
    return None


def job_succeeded(run: JobRun, spec: dict[str, Any], unfinished: int) -> bool:
    """All completions (or, for Indexed, all indexes) succeeded; without ``completions`` (a
    work queue) one success with nothing left running is enough."""
    completions = spec.get("completions")
    if spec.get("completionMode") == "Indexed":
        return len(run.succeeded_indexes) >= int(completions or 0)
    if completions is not None:
        return len(run.succeeded) >= int(completions)
    return bool(run.succeeded) and unfinished == 0


def pods_to_create(run: JobRun, spec: dict[str, Any], active: list[PodRun]) -> Sequence[int | None]:
    """The pods the Job lacks now, within ``parallelism``: their indexes when Indexed (lowest
    missing first), otherwise one ``None`` per pod."""
    room = max(0, int(spec.get("parallelism", 1)) - len(active))
    completions = spec.get("completions")
    if spec.get("completionMode") == "Indexed":
        busy = {r.index for r in active} | run.succeeded_indexes
        return [i for i in range(int(completions or 0)) if i not in busy][:room]
    if completions is not None:
        wanted = int(completions) - len(run.succeeded) - len(active)
        return [None] * max(0, min(room, wanted))
    return [None] * (room if not run.succeeded else 0)


def add_condition(run: JobRun, kind: str, reason: str, message: str, moment: datetime) -> None:
    """Append a ``True`` condition of ``kind`` unless the Job already has one."""
    if any(c["type"] == kind for c in run.conditions):
        return
    stamp = rfc3339(moment)
    run.conditions.append(
        {
            "type": kind,
            "status": "True",
            "lastProbeTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
    )


def job_status(run: JobRun, spec: dict[str, Any], pods: list[PodRun]) -> dict[str, Any]:
    """The Job's ``status`` (counts omitted at zero, ``ready``/``terminating`` always, as the
    API serializes them)."""
    status: dict[str, Any] = {}
    if run.start is not None:
        status["startTime"] = rfc3339(run.start)
    active = sum(1 for r in pods if r.active)
    if active:
        status["active"] = active
    if run.succeeded:
        status["succeeded"] = len(run.succeeded)
    if run.failed:
        status["failed"] = len(run.failed)
    status["terminating"] = sum(1 for r in pods if r.deleting and r.finished_at is None)
    status["ready"] = sum(1 for r in pods if r.running and not r.deleting)
    status["uncountedTerminatedPods"] = {}
    if spec.get("completionMode") == "Indexed":
        status["completedIndexes"] = index_ranges(run.succeeded_indexes)
    if run.conditions:
        status["conditions"] = copy.deepcopy(run.conditions)
    if run.completion is not None:
        status["completionTime"] = rfc3339(run.completion)
    return status


def index_ranges(indexes: set[int]) -> str:
    """``{0, 1, 2, 4}`` → ``"0-2,4"`` (a Job's ``status.completedIndexes``)."""
    ranges: list[str] = []
    start = previous = None
    for index in sorted(indexes):
        if start is None or previous is None:
            start = previous = index
        elif index == previous + 1:
            previous = index
        else:
            ranges.append(f"{start}-{previous}" if start != previous else str(start))
            start = previous = index
    if start is not None:
        ranges.append(f"{start}-{previous}" if start != previous else str(start))
    return ",".join(ranges)
