"""What one pass of the planner carries: the state, the head-of-queue reservations made so far
(``Shadow``, ``QuotaShadow``), the decisions (admissions, preemptions, ``Outcome``s) and the
verdicts it caches; and ``admit``, which holds a job's GPUs and charges the reservations it runs
past."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from queues.admission.asks import Ask
from queues.admission.fit import Fit, hold
from queues.admission.plan import Admission, Preemption
from queues.admission.reasons import PendingReason
from queues.admission.snapshot import (
    CapacityKind,
    JobId,
    PlannedNodes,
)
from queues.admission.state import Alloc, Placement, Pool, State, pods_nodes


@dataclass(slots=True)
class Shadow:
    """The head-of-queue reservation of a blocked job on a class: from ``time`` to ``end`` it
    needs ``used`` devices of ``pool`` (per local node) and ``eq`` of the class aggregate.
    ``extra`` (per node of ``pool``) and ``eq_extra`` are what is left at ``time`` once it and
    every reservation running then have theirs: a later job that would still run at ``time`` may
    use only that. ``placement`` is the nodes chosen for its pods: the next pass (or plan) takes
    them first where they still fit (``Pass.kept``)."""

    job_id: JobId
    time: datetime
    end: datetime
    pool: Pool
    used: list[tuple[int, int]]
    eq: int
    extra: list[int]
    eq_extra: int
    placement: Placement = field(default_factory=list)  # its pods per local node of ``pool``


@dataclass(slots=True)
class QuotaShadow:
    """The same reservation on its team's quota of the class: from ``time`` to ``end`` it needs
    ``demand`` of the quota (within nominal when ``nominal``). A later job of the team that
    would still run at ``time`` may take only ``total_room`` more of the quota (and
    ``nominal_room`` more within nominal, when the reserved job needs nominal)."""

    job_id: JobId
    time: datetime
    end: datetime
    demand: int
    nominal: bool
    total_room: int
    nominal_room: int | None


@dataclass(slots=True)
class Outcome:
    """What the pass decided for one pending job that it did not admit."""

    ask: Ask
    reasons: list[PendingReason]
    backfill_blocked_by: JobId | None = None
    held_quota: bool = False  # blocked by its team's quota shadow, not a class's
    preempting: tuple[JobId, ...] = ()
    start: datetime | None = None
    would_admit: bool = False


@dataclass
class Pass:
    state: State
    dry_run: bool
    # head-of-queue reservations per class and per (team, class), in plan order
    shadows: dict[str, list[Shadow]] = field(default_factory=dict)
    quota_shadows: dict[tuple[str, str], list[QuotaShadow]] = field(default_factory=dict)
    reserved: int = 0  # reservations made so far in the pass
    walked: int = 0  # events the reservation walks visited (their cost)
    views: dict[tuple[Any, ...], tuple[list[int] | None, int]] = field(default_factory=dict)
    floors: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)  # ``left_by``
    shaded: int = 0  # changes to what the shadows leave (``Shadow.extra``): ``floors``' key
    held: dict[tuple[Any, ...], tuple[JobId | None, bool]] = field(default_factory=dict)
    preempt: bool = True  # False in the forecast: it does not foresee preemptions
    explain: bool = True  # False in the forecast: it needs the decisions, not their reasons
    explain_only: AbstractSet[JobId] | None = None  # the jobs to explain (None: all)
    no_shadow: set[tuple[Any, ...]] = field(default_factory=set)
    fresh: set[JobId] = field(default_factory=set)
    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    no_fit: set[tuple[Any, ...]] = field(default_factory=set)
    no_preempt: set[tuple[Any, ...]] = field(default_factory=set)
    causes: dict[tuple[Any, ...], list[tuple[str, list[PendingReason]]]] = field(
        default_factory=dict
    )
    # The nodes each job's head-of-queue reservation chose before, by GPU class: in the
    # forecast, the pass at the previous moment; in a plan, the previous plan's (the snapshot's
    # ``PendingJob.kept_nodes``). A job starts there, and a new reservation for it is made
    # there, where they still fit: the nodes the jobs behind it were planned around stay its
    # own, and a later job's backfill cannot send it elsewhere.
    kept: dict[JobId, tuple[str, Placement]] = field(default_factory=dict)

    def kept_nodes(self, job_id: JobId, gpu_class: str) -> Placement | None:
        found = self.kept.get(job_id)
        return found[1] if found is not None and found[0] == gpu_class else None

    def planned_nodes(self) -> tuple[tuple[JobId, PlannedNodes], ...]:
        """This pass's reservations' nodes by job id, by node name (``Plan.planned_nodes``)."""
        nodes = self.state.nodes
        found = []
        for gpu_class, shadows in self.shadows.items():
            for shadow in shadows:
                names = tuple(
                    nodes[shadow.pool.nodes[local]].name
                    for local, pods in shadow.placement
                    for _ in range(pods)
                )
                found.append((shadow.job_id, PlannedNodes(gpu_class, names)))
        return tuple(sorted(found, key=lambda item: item[0]))

    def reserved_nodes(self) -> dict[JobId, tuple[str, Placement]]:
        """``kept`` for the next pass: this pass's reservations' nodes (and only those, as the
        next plan gets only ``Plan.planned_nodes``)."""
        return {
            shadow.job_id: (gpu_class, shadow.placement)
            for gpu_class, shadows in self.shadows.items()
            for shadow in shadows
        }


def versions(state: State, ask: Ask) -> int | tuple[int, ...]:
    """The versions of ``ask``'s classes, for cache keys (one class, the usual case: an int;
    asks of equal ``key`` have the same classes, so the two forms never meet)."""
    classes = ask.classes
    if len(classes) == 1:
        return state.class_version[classes[0]]
    return tuple(state.class_version[c] for c in classes)


def admit(run: Pass, ask: Ask, fit: Fit, start: datetime | None = None) -> Alloc:
    state = run.state
    alloc = hold(state, ask, fit, start or state.now)
    if fit.kind is not CapacityKind.RESERVED:
        for quota in run.quota_shadows.get((ask.job.team, fit.gpu_class), ()):
            if alloc.end > quota.time and alloc.job_id != quota.job_id:
                quota.total_room -= alloc.eq
                if fit.kind is CapacityKind.NOMINAL and quota.nominal_room is not None:
                    quota.nominal_room -= alloc.eq
    run.fresh.add(ask.job.id)
    borrowed = 0
    if fit.kind is CapacityKind.BORROWED:
        # what the job adds to the team's use beyond nominal; the rest fills nominal room
        borrowed = min(alloc.eq, state.borrowing((ask.job.team, fit.gpu_class)))
    shadows = run.shadows.get(fit.gpu_class, ())
    for shadow in shadows:
        if alloc.end > shadow.time:
            shadow.eq_extra -= alloc.eq
            if shadow.pool is fit.pool:
                run.shaded += 1
                for spot in alloc.spots:
                    shadow.extra[spot.local] -= spot.devices
    if start is None:
        if run.dry_run:
            run.outcomes.append(Outcome(ask, [], start=state.now, would_admit=True))
        else:
            run.admissions.append(
                Admission(
                    job_id=ask.job.id,
                    gpu_class=fit.gpu_class,
                    nodes=pods_nodes(state, alloc.spots),
                    gpu_eq=Fraction(alloc.eq, state.scale),
                    capacity=fit.kind,
                    reservation_id=fit.reservation_id,
                    backfilled=bool(shadows),
                    borrowed_gpu_eq=Fraction(borrowed, state.scale),
                )
            )
    return alloc


def kept_from(state: State, asks: Sequence[Ask]) -> dict[JobId, tuple[str, Placement]]:
    """``Pass.kept`` from the snapshot: each waiting job's ``planned_nodes`` as a placement in
    its pool (nodes gone from the cluster or from the pool drop the whole job's)."""
    kept: dict[JobId, tuple[str, Placement]] = {}
    for ask in asks:
        planned = ask.job.planned_nodes
        if planned is None or not planned.nodes:
            continue
        pool = state.pools.get((planned.gpu_class, ask.mode, ask.profile))
        if pool is None:
            continue
        pods: dict[int, int] = {}
        for name in planned.nodes:
            index = state.node_index.get(name)
            local = None if index is None else pool.local_of.get(index)
            if local is None:
                break
            pods[local] = pods.get(local, 0) + 1
        else:
            kept[ask.job.id] = (planned.gpu_class, sorted(pods.items()))
    return kept
