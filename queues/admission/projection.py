"""The forecast's far end: the estimated starts of the jobs a long queue's simulation does not
reach, projected from the capacity they queue for (``project``).

With more than ``FORECAST_HORIZON`` jobs waiting, each of the forecast's simulations takes the
first ``forecast.HEAD_PER_START`` × ``FORECAST_HORIZON`` of them in plan order and stops once
``FORECAST_HORIZON`` have started (``estimate.simulate``). A job it did not start, or did not
take, waits behind more than a thousand others, hours to weeks, and its start depends on the
work queued ahead of it far more than on which node frees first. So from where the simulation
stopped, each is placed by its work, in plan order: on each GPU class it may use, it starts once
the capacity freed since then has done the work of the jobs queued ahead of it on that class
(GPU-equivalents × runtime), less what is still in flight — and no sooner than its team's
entitlement on the class and its user's caps in the queue let it, counted the same way over the
team's (user's) own jobs and what it holds. It goes to the class where that comes first.

The model is a *fluid* one: a job's GPUs can be any of the class's (no node packing, gangs or
topology), and while the queue is long what runs keeps the class full: P jobs in flight, evenly
spread, have (P - 1) / P of half a runtime left on average when one ends. ``docs/admission.md``
says what that means for a member; ``docs/benchmarks.md`` measures it against simulating every
job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from queues.admission.asks import Ask
from queues.admission.never import entitlement_of
from queues.admission.plan import EstimatedStart
from queues.admission.snapshot import CapacityKind, JobId
from queues.admission.state import State

# Starts each of the forecast's simulations makes before the jobs it has not started are
# projected; with at most this many waiting, nothing is (docs/admission.md, "Beyond the
# horizon").
FORECAST_HORIZON = 1_500


# What holds GPUs when the projection begins: from, until (seconds after its origin), the
# class, team, queue, user, the scaled GPU-equivalents held and as what (nominal quota,
# borrowed, a reservation).
Interval = tuple[float, float, str, str, str, str, int, CapacityKind]


@dataclass(slots=True)
class _Line:
    """One capacity jobs queue for (a class, a team on a class, a user in a queue), in seconds
    after the origin and scaled GPU-equivalents (jobs, for a cap on running jobs): how much it
    holds, when what holds it changes, and how far the walk over those changes has got. The walk
    only moves forward: the work queued ahead of a job only grows in plan order."""

    capacity: int
    changes: list[tuple[float, int]]  # (seconds after the origin, held + or -), sorted
    residual: float  # seconds each job in flight has left, on average
    held: int = 0  # held by the schedule at the walk's moment
    free: int = 0  # the capacity not held then (never below 0)
    at: float = 0.0  # the walk's moment
    done: float = 0.0  # work the free capacity has done by ``at``
    ready: float = 0.0  # work queued ahead that is all running at ``at``
    next: int = 0  # the first change not yet passed
    end: float = math.inf  # when it comes (the walk's segment ends)

    @classmethod
    def of(cls, capacity: int, changes: list[tuple[float, int]], residual: float) -> _Line:
        line = cls(capacity, changes, residual)
        line.advance(0.0)
        return line

    def advance(self, to: float) -> None:
        """Move the walk to ``to``, taking in every change up to then."""
        changes = self.changes
        while self.next < len(changes) and changes[self.next][0] <= to:
            self.held += changes[self.next][1]
            self.next += 1
        self.at = to
        self.end = changes[self.next][0] if self.next < len(changes) else math.inf
        self.free = max(0, self.capacity - self.held)
        # with nothing free, nothing starts, however little is queued ahead
        self.ready = self.done + self.free * self.residual if self.free else -1.0

    def when(self, work: float) -> float:
        """Seconds after the origin at which the jobs queued ahead (``work``) are all running: the
        free capacity has done ``work`` less what is still in flight (the line full, each
        job in flight with ``residual`` seconds left on average). What ran before may hold
        more than the line (a team borrowing beyond a smaller entitlement): it leaves room only
        once below."""
        while work > self.ready:
            free, end = self.free, self.end
            if free:
                needed = self.at + (work - self.ready) / free
                if needed <= end:
                    return needed
            if end == math.inf:
                return end  # nothing ever frees: no capacity at all
            self.done += free * (end - self.at)
            self.advance(end)
        return self.at


# One line a job queues on: the line, the work queued on it so far (shared by the lines of a
# team's or user's capacity: a team's line per entitlement, a user's per cap), and whether a
# job counts 1 there (a cap on running jobs) instead of its GPU-equivalents.
Route = list[tuple[_Line, list[float], bool]]


def project(
    state: State,
    jobs: Sequence[Ask],
    ghosts: Sequence[Ask],
    schedule: Iterable[Interval],
    origin: datetime,
    runtime_of: Callable[[Ask], timedelta],
    returning: Mapping[str, int] | None = None,
    chosen: dict[JobId, str] | None = None,
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart]]:
    """Projected starts of ``jobs`` (in plan order) and ``ghosts`` (probes: they queue no work)
    from ``origin`` on, behind ``schedule`` (seconds after ``origin``; see the module
    docstring). ``returning``: per class, the capacity of nodes that come back later (the
    schedule holds it until then). ``chosen``: the class each job was projected on, by an
    earlier scenario (kept) or now (added)."""
    runtimes: list[float] = []
    work = longer = wider = 0.0
    for ask in jobs:
        seconds = runtime_of(ask).total_seconds()
        runtimes.append(seconds)
        demand = ask.min_demand
        work += demand * seconds
        longer += demand * seconds * seconds
        wider += demand * demand * seconds
    # the runtime and GPU-equivalents of the jobs, each weighted by its work
    runtime, width = (longer / work, wider / work) if work else (0.0, 0.0)
    projection = _Projection(state, schedule, origin, runtime, width)
    projection.chosen = {} if chosen is None else chosen
    for name, amount in (returning or {}).items():
        projection.capacity[name] = projection.capacity.get(name, 0) + amount
    place, estimate = projection.place, projection.estimate

    results: dict[JobId, EstimatedStart] = {}
    probe_results: dict[JobId, EstimatedStart] = {}
    ordered = sorted(ghosts, key=lambda g: (g.order, g.job.id))
    next_ghost = 0
    ghost_order = ordered[0].order if ordered else math.inf
    for ask, seconds in zip(jobs, runtimes, strict=True):
        if ghost_order <= ask.order:  # probes at their place: after the jobs ahead of them
            while next_ghost < len(ordered) and ordered[next_ghost].order <= ask.order:
                probe = ordered[next_ghost]
                probe_results[probe.job.id] = estimate(probe, *place(probe, False)[:2])
                next_ghost += 1
            ghost_order = ordered[next_ghost].order if next_ghost < len(ordered) else math.inf
        when, gpu_class, route = place(ask)
        results[ask.job.id] = estimate(ask, when, gpu_class)
        if gpu_class is None or when == math.inf:
            continue
        demand = ask.demand[gpu_class]
        for _, queued, per_job in route:
            queued[0] += seconds if per_job else demand * seconds
    for ghost in ordered[next_ghost:]:
        probe_results[ghost.job.id] = estimate(ghost, *place(ghost, False)[:2])
    return results, probe_results


class _Projection:
    """The lines of ``project`` and the routes jobs take over them."""

    def __init__(
        self,
        state: State,
        schedule: Iterable[Interval],
        origin: datetime,
        runtime: float,
        width: float,
    ) -> None:
        self.state = state
        self.origin = origin
        self.runtime = runtime  # a job's, on average
        self.width = width  # a job's GPU-equivalents, on average
        self.capacity = dict(state.class_capacity)  # of each class, nodes coming back too
        self.chosen: dict[JobId, str] = {}  # the class a job was placed on (``place``)
        # what the schedule holds on each line's key, as changes in time: ("c", class); a
        # team's on a class: ("n", ...) as nominal, ("q", ...) on its quota (nominal or
        # borrowed), ("r", ...) on its reservations; ("ue", queue, user) in GPU-eq and
        # ("uj", queue, user) in jobs
        self.changes: dict[tuple[str, ...], list[tuple[float, int]]] = {}
        for start, end, gpu_class, team, queue, user, eq, kind in schedule:
            held: list[tuple[str, ...]] = [
                ("c", gpu_class),
                ("ue", queue, user),
                ("uj", queue, user),
            ]
            if kind is CapacityKind.RESERVED:
                held.append(("r", team, gpu_class))
            else:
                held.append(("q", team, gpu_class))
                if kind is CapacityKind.NOMINAL:
                    held.append(("n", team, gpu_class))
            for key in held:
                amount = 1 if key[0] == "uj" else eq
                into = self.changes.setdefault(key, [])
                into.append((start, amount))
                into.append((end, -amount))
        for changes in self.changes.values():
            changes.sort()
        self.lines: dict[tuple[object, ...], _Line] = {}  # by key and capacity
        self.queued: dict[tuple[str, ...], list[float]] = {}
        self.routes: dict[tuple[str, str, str], Route] = {}  # by team, queue, class
        self.users: dict[tuple[str, str], Route] = {}  # by queue, user

    def place(self, ask: Ask, keep: bool = True) -> tuple[float, str | None, Route]:
        """Where ``ask`` starts first: seconds after the origin, the class and the lines it
        queues on there. The class a job (``keep``) was placed on in an earlier scenario's
        projection is kept: scenarios differ in how long jobs run, not where."""
        queue = ask.queue
        team = ask.job.team
        users: Route = []
        earliest = 0.0  # what its user's caps in the queue allow, on any class
        if queue.max_running_jobs_per_user is not None or queue.max_gpu_eq_per_user is not None:
            users = self.users.get((queue.name, ask.job.user)) or self.user_route(ask)
            for line, queued, _ in users:
                at = line.when(queued[0])
                if at > earliest:
                    earliest = at
        best, chosen, chosen_route = math.inf, None, users
        routes = self.routes
        kept = self.chosen.get(ask.job.id) if keep else None
        for gpu_class in ask.classes if kept is None else (kept,):
            route = routes.get((team, queue.name, gpu_class)) or self.route(ask, gpu_class)
            when = earliest
            for line, queued, _ in route:
                work = queued[0]
                if work <= line.ready:
                    at = line.at
                elif line.free and (at := line.at + (work - line.ready) / line.free) <= line.end:
                    pass  # within the walk's segment
                else:
                    at = line.when(work)
                if at > when:
                    when = at
            if when < best:
                best, chosen, chosen_route = when, gpu_class, route
        if keep and kept is None and chosen is not None:
            self.chosen[ask.job.id] = chosen
        if users and chosen is not None:
            chosen_route = [*chosen_route, *users]
        return best, chosen, chosen_route

    def estimate(self, ask: Ask, when: float, gpu_class: str | None) -> EstimatedStart:
        if gpu_class is None or when == math.inf:
            return _NOT_FOUND
        at = self.origin + timedelta(seconds=when)
        if ask.held_until is not None and ask.held_until > at:
            at = ask.held_until
        return EstimatedStart(at, "", None, None, gpu_class, projected=True)

    def route(self, ask: Ask, gpu_class: str) -> Route:
        """The lines a job of the ask's team and queue queues on on ``gpu_class``: the class's
        and its team's entitlement's (``diagnose.entitlement``: a job that may not borrow
        stays within the nominal quota, and every job within nominal + borrowing limit; a
        reservation-only queue's within the team's reservations)."""
        queue = ask.queue
        team = ask.job.team
        most = self.most(ask, gpu_class)
        found = [self._on(("c", gpu_class), self.capacity[gpu_class])]
        if queue.reservation_only:
            found.append(self._on(("r", team, gpu_class), most))
        else:
            key = (team, gpu_class)
            quota = self.state.nominal.get(key, 0) + self.state.borrow_limit.get(key, 0)
            found.append(self._on(("q", team, gpu_class), max(most, quota)))
            if not queue.can_borrow:
                found.append(self._on(("n", team, gpu_class), most))
        if not self.capacity.get(gpu_class):
            found = [(_NOWHERE, [0.0], False)]  # no node of the class may take jobs
        self.routes[(team, queue.name, gpu_class)] = found
        return found

    def most(self, ask: Ask, gpu_class: str) -> int:
        """The most the ask's team may hold of ``gpu_class`` for its queue's jobs, scaled."""
        key = (ask.job.team, ask.queue.name, gpu_class)
        most = self.state.most_memo.get(key)
        if most is None:
            most = self.state.eq_units(entitlement_of(self.state, ask, gpu_class).most)
            self.state.most_memo[key] = most
        return most

    def user_route(self, ask: Ask) -> Route:
        """The lines of the ask's user's caps in its queue (on running jobs, on GPU-eq)."""
        queue = ask.queue
        user = ask.job.user
        found = []
        if queue.max_running_jobs_per_user is not None:
            found.append(self._on(("uj", queue.name, user), queue.max_running_jobs_per_user))
        if queue.max_gpu_eq_per_user is not None:
            cap = self.state.eq_units(queue.max_gpu_eq_per_user)
            found.append(self._on(("ue", queue.name, user), cap))
        self.users[(queue.name, user)] = found
        return found

    def _on(self, key: tuple[str, ...], capacity: int) -> tuple[_Line, list[float], bool]:
        """The line of ``key`` with ``capacity`` (one per capacity: a team's entitlement
        depends on the queue), and the work queued on ``key``."""
        line = self.lines.get((*key, capacity))
        if line is None:
            changes = self.changes.get(key, [])
            # P jobs in flight, evenly spread, have (P - 1) / P of half a runtime left on
            # average when one of them ends: half a runtime on a class, none on a quota
            # that holds one job at a time
            width = 1 if key[0] == "uj" else self.width
            parallel = capacity / width if width else 0.0
            residual = self.runtime / 2 * (1 - 1 / parallel) if parallel > 1 else 0.0
            line = self.lines[(*key, capacity)] = _Line.of(capacity, changes, residual)
        return line, self.queued.setdefault(key, [0.0]), key[0] == "uj"


# A class with no node that may take jobs: nothing starts there.
_NOWHERE = _Line(0, [], 0.0, ready=-1.0)

_NOT_FOUND = EstimatedStart(at=None, why_unknown="no start found: no capacity it may use frees up")
