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
team's (user's) own jobs and what it holds. It goes to the class where that comes first; the
forecast's other scenarios keep the class the first one started it on (``project``'s
``chosen``), and so project all their jobs at once (``_Kept``).

The model is a *fluid* one: a job's GPUs can be any of the class's (no node packing, gangs or
topology), and while the queue is long what runs keeps the class full: P jobs in flight, evenly
spread, have (P - 1) / P of half a runtime left on average when one ends. ``docs/admission.md``
says what that means for a member; ``docs/benchmarks.md`` measures it against simulating every
job.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from queues.admission.asks import Ask
from queues.admission.plan import EstimatedStart
from queues.admission.snapshot import CapacityKind, Forecast, JobId
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
        free = self.capacity - self.held
        self.free = free if free > 0 else 0
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


@dataclass(frozen=True, slots=True)
class _Profiles:
    """Lines' walks laid out one after another (``_Line.when``'s segments), so that one search
    serves every line: per segment between two changes of a line, when it begins and ends, the most
    work the line has got ready by its end or any earlier one's, what it has ready when it
    begins and the capacity free in it; per line, where its segments are. The first segment of
    a line whose most reaches an amount of work is where ``_Line.when`` stops for it."""

    begins: np.ndarray
    ends: np.ndarray
    most: np.ndarray
    ready: np.ndarray
    free: np.ndarray
    first: np.ndarray  # per line: its first segment
    stop: np.ndarray  # per line: after its last
    # the distinct values of ``most``, sorted; and per segment its line and the rank of its
    # most among them in one number (``_rank_key``), non-decreasing from one segment to the next
    ranked: np.ndarray
    keys: np.ndarray

    @classmethod
    def of(cls, lines: Sequence[_Line]) -> _Profiles:
        """Every line's walk laid out at once, segment by segment from 0 and from each later
        moment a change comes (a segment of no free capacity, or the last, adds no work): the
        running sums and maxima are taken line by line in the walk's order, so that they round
        as its own sums do."""
        count = len(lines)
        changes = [change for line in lines for change in line.changes]
        per_line = np.fromiter((len(line.changes) for line in lines), dtype=np.intp, count=count)
        table = np.asarray(changes, dtype=float).reshape(len(changes), 2)
        times, amounts = table[:, 0], table[:, 1]
        change_line = np.repeat(np.arange(count, dtype=np.intp), per_line)
        change_first = np.cumsum(per_line) - per_line
        # held after each change, a running sum per line (whole numbers: exact), and when the
        # walk begins (after every change at 0 or before)
        held_after = np.cumsum(amounts)
        held_zero = np.zeros(count)
        if len(changes):
            ahead = np.where(change_first > 0, held_after[change_first - 1], 0.0)
            held_after -= np.repeat(ahead, per_line)
            at_zero = np.bincount(change_line[times <= 0.0], minlength=count)
            upto = held_after[np.maximum(change_first + at_zero - 1, 0)]
            held_zero = np.where(at_zero > 0, upto, 0.0)
        # the walk's segments: from 0, and from each later moment something changes (held
        # after the last change then), ordered by line, then time
        last_then = np.ones(len(changes), dtype=bool)
        last_then[:-1] = (change_line[1:] != change_line[:-1]) | (times[1:] != times[:-1])
        inner = last_then & (times > 0.0) & (times < math.inf)
        line_of = np.concatenate((np.arange(count, dtype=np.intp), change_line[inner]))
        begins = np.concatenate((np.zeros(count), times[inner]))
        held = np.concatenate((held_zero, held_after[inner]))
        order = np.lexsort((begins, line_of))
        line_of, begins, held = line_of[order], begins[order], held[order]
        stops = np.cumsum(np.bincount(line_of, minlength=count))
        firsts = np.concatenate(([0], stops[:-1])).astype(np.intp)
        stops = stops.astype(np.intp)
        last = np.zeros(len(begins), dtype=bool)
        last[stops - 1] = True
        ends = np.empty(len(begins))
        ends[:-1] = begins[1:]
        ends[last] = math.inf
        capacity = np.asarray([line.capacity for line in lines], dtype=float)[line_of]
        residual = np.asarray([line.residual for line in lines], dtype=float)[line_of]
        free = np.maximum(capacity - held, 0.0)
        gain = free * np.where(last, 0.0, ends - begins)  # the work done in each
        done = np.empty(len(begins))  # by each segment's end
        bounds = list(zip(firsts.tolist(), stops.tolist(), strict=True))
        for first, stop in bounds:
            np.cumsum(gain[first:stop], out=done[first:stop])
        done_before = np.empty(len(begins))
        done_before[1:] = done[:-1]
        done_before[firsts] = 0.0
        room = free > 0
        ready = np.where(room, done_before + free * residual, -1.0)
        most = np.where(room, done + free * residual, -math.inf)
        for first, stop in bounds:
            np.maximum.accumulate(most[first:stop], out=most[first:stop])
        most[last & room] = math.inf
        ranked = np.unique(most)  # sorted, distinct
        return cls(
            begins,
            ends,
            most,
            ready,
            free,
            firsts,
            stops,
            ranked,
            _rank_key(line_of.astype(np.int64), np.searchsorted(ranked, most), len(ranked)),
        )

    def when(self, line: np.ndarray, work: np.ndarray) -> np.ndarray:
        """``_Line.when`` of each amount of ``work`` on its ``line`` (indexes into the lines
        laid out): a search (all at once) finds the segment to within float rounding, and from
        there the walk's own test (``work`` ready when the segment begins, or done by its end)
        picks it, so both give the same number."""
        # from a little below: a segment whose most is ``work`` but for rounding is tried too
        target = work - (np.abs(work) * 1e-9 + 1e-6)
        last = self.stop[line]
        # the first of its line's segments whose most is at least the target (its line's stop
        # if none): a most at least the target ranks at least where the target would
        wanted = _rank_key(
            line.astype(np.int64), np.searchsorted(self.ranked, target), len(self.ranked)
        )
        segment = np.searchsorted(self.keys, wanted).astype(np.intp)
        at = np.full(len(work), math.inf)
        todo = np.arange(len(work))
        while len(todo):
            todo = todo[segment[todo] < last[todo]]
            if not len(todo):
                break
            here = segment[todo]
            amount = work[todo]
            ready, free, begins = self.ready[here], self.free[here], self.begins[here]
            with np.errstate(divide="ignore", invalid="ignore"):
                needed = begins + (amount - ready) / free
            now = amount <= ready
            done = now | ((free > 0) & (needed <= self.ends[here]))
            at[todo[done]] = np.where(now, begins, needed)[done]
            todo = todo[~done]
            segment[todo] += 1
        return at


def _rank_key(line: np.ndarray, rank: np.ndarray, ranks: int) -> np.ndarray:
    """A line's index and a rank among ``ranks`` in one number that orders by line, then rank."""
    return line * (ranks + 1) + rank


@dataclass(slots=True)
class _Queued:
    """The work queued on a line's key, shared by its lines (a team's per entitlement, a
    user's per cap)."""

    work: float = 0.0


# One line a job queues on: the line, the work queued on its key, and whether a job counts 1
# there (a cap on running jobs) instead of its GPU-equivalents.
Route = list[tuple[_Line, _Queued, bool]]


# One job of each group of jobs that queue on the same lines, with its class; each job's group;
# each job's GPU-eq on its class (``_groups``).
_Groups = tuple[list[tuple[Ask, str]], np.ndarray, np.ndarray]


def _groups(jobs: Sequence[Ask], chosen: Mapping[JobId, str]) -> _Groups | None:
    """With every job's class ``chosen``: one job of each group that queues on the same lines
    (team, queue, class, user where the queue caps users) and its class, each job's group, and
    each job's GPU-eq on its class; None while a job has no class chosen."""
    members: list[tuple[Ask, str]] = []
    index: dict[tuple[str, str, str, str | None], int] = {}
    group_of, demand = [], []
    for ask in jobs:
        gpu_class = chosen.get(ask.job.id)
        if gpu_class is None:
            return None
        queue = ask.queue
        capped = queue.caps_users
        key = (ask.job.team, queue.name, gpu_class, ask.job.user if capped else None)
        group = index.get(key)
        if group is None:
            group = index[key] = len(members)
            members.append((ask, gpu_class))
        group_of.append(group)
        demand.append(ask.demand[gpu_class])
    return members, np.asarray(group_of, dtype=np.intp), np.asarray(demand, dtype=float)


@dataclass(slots=True)
class Tail:
    """The jobs and probes a forecast projects behind every scenario's simulation (those past
    its head, in plan order; each job may start), worked out once for all the scenarios: each
    job's runtime limit and forecast (``kinds``: scenarios differ only in the share of its limit
    a job runs, one share per forecast), and the sums ``_shapes`` needs, per group of jobs that
    queue on the same lines with the same forecast."""

    jobs: list[Ask]
    probes: list[Ask]
    limits: np.ndarray = field(default_factory=lambda: np.empty(0))  # seconds
    kinds: list[Forecast] = field(default_factory=list)  # the distinct forecasts
    kind_of: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.intp))  # per job
    # per group: the shape keys its jobs queue on, its forecast, and over its jobs the sums of
    # GPU-eq × limit, × limit², and GPU-eq² × limit
    groups: list[tuple[list[tuple[str, ...]], Forecast, float, float, float]] = field(
        default_factory=list
    )
    # once every job's class is chosen (``kept_groups``)
    kept: _Groups | None = None

    @classmethod
    def of(cls, jobs: list[Ask], probes: list[Ask], kind_of: Callable[[Ask], Forecast]) -> Tail:
        tail = cls(jobs, probes)
        kinds: dict[tuple[float, float, float], int] = {}  # (by value, as ``forecast``'s)
        limits: list[float] = []
        kind_index: list[int] = []
        # Jobs of one ``Ask.key`` share their team, queue, classes, size and limit: per key, one
        # of its asks, its limit and whether its queue caps users; the jobs counted by key,
        # user (in a queue that caps users) and forecast (its index), then summed per group
        keyed: dict[int, tuple[Ask, float, bool]] = {}
        counts: dict[tuple[int, str | None, int], int] = {}
        for ask in jobs:
            known = keyed.get(ask.key)
            if known is None:
                known = keyed[ask.key] = (ask, ask.runtime.total_seconds(), ask.queue.caps_users)
            limit, caps = known[1], known[2]
            kind = kind_of(ask)
            value = (kind.likely, kind.low, kind.high)
            index = kinds.get(value)
            if index is None:
                index = kinds[value] = len(kinds)
                tail.kinds.append(kind)
            limits.append(limit)
            kind_index.append(index)
            counted = (ask.key, ask.job.user if caps else None, index)
            counts[counted] = counts.get(counted, 0) + 1
        # by team, classes, user (in a queue that caps users), queue, forecast (its index)
        sums: dict[tuple[str, tuple[str, ...], str | None, str, int], list[float]] = {}
        for (key, user, index), count in counts.items():
            ask, limit, _ = keyed[key]
            group = (ask.job.team, ask.classes, user, ask.queue.name, index)
            found = sums.get(group)
            if found is None:
                found = sums[group] = [0.0, 0.0, 0.0]
            demand = ask.min_demand
            work = demand * limit * count
            found[0] += work
            found[1] += work * limit
            found[2] += work * demand
        tail.limits = np.asarray(limits, dtype=float)
        tail.kind_of = np.asarray(kind_index, dtype=np.intp)
        for (team, classes, user, queue_name, index), (work, longer, wider) in sums.items():
            keys = _shape_keys(team, classes, queue_name, user)
            tail.groups.append((keys, tail.kinds[index], work, longer, wider))
        return tail

    def kept_groups(self, chosen: Mapping[JobId, str]) -> _Groups | None:
        """``_groups`` of the tail's jobs, worked out once every job's class is chosen."""
        if self.kept is None:
            self.kept = _groups(self.jobs, chosen)
        return self.kept

    def run(self, ratio: Callable[[Forecast], float]) -> TailRun:
        """The tail in a scenario where jobs run ``ratio`` of their limits (by forecast): each
        job's runtime in seconds, and the jobs' ``_shapes``."""
        ratios = {kind: ratio(kind) for kind in self.kinds}
        shares = np.asarray([ratios[kind] for kind in self.kinds], dtype=float)
        runtimes = self.limits * shares[self.kind_of] if self.kinds else np.empty(0)
        shapes: dict[tuple[str, ...], _Shape] = {}
        for keys, kind, work, longer, wider in self.groups:
            share = ratios[kind]
            _add_shape(shapes, keys, work * share, longer * share * share, wider * share)
        return TailRun(self, runtimes, shapes)


@dataclass(slots=True)
class TailRun:
    """A ``Tail`` in one scenario (``Tail.run``)."""

    tail: Tail
    runtimes: np.ndarray  # seconds, per job
    shapes: dict[tuple[str, ...], _Shape]


def project(
    state: State,
    jobs: Sequence[Ask],
    ghosts: Sequence[Ask],
    schedule: Iterable[Interval],
    origin: datetime,
    runtimes: Sequence[float],
    tail: TailRun | None = None,
    returning: Mapping[str, int] | None = None,
    chosen: dict[JobId, str] | None = None,
    floors: tuple[datetime, Mapping[JobId, datetime], Mapping[JobId, datetime]] | None = None,
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart], list[float] | None]:
    """Projected starts of ``jobs`` (in plan order; each may start; ``runtimes``: how long each
    runs, in seconds), then ``tail``'s (the third: seconds after ``origin`` in the tail's
    order, inf where none is found, before any back-off; ``combine_tail`` makes them
    estimates), and of ``ghosts`` and the tail's probes (they queue no work) from ``origin``
    on, behind ``schedule`` (seconds after ``origin``; see the module
    docstring). ``returning``: per class, the capacity of nodes that come back later (the
    schedule holds it until then). ``chosen``: the class each job was projected on, by an
    earlier scenario (kept) or now (added). ``floors``: no job starts before the first, nor a
    job (probe) named in the second (third) before the time given there."""
    shapes = _shapes(jobs, runtimes, into=None if tail is None else tail.shapes)
    projection = _Projection(state, schedule, origin, shapes)
    projection.chosen = {} if chosen is None else chosen
    for name, amount in (returning or {}).items():
        projection.capacity[name] = projection.capacity.get(name, 0) + amount
    place, estimate = projection.place, projection.estimate
    first, floor_of, probe_floor_of = floors or (origin, {}, {})
    floor = (first - origin).total_seconds()

    def least(of: Mapping[JobId, datetime], job_id: JobId) -> float:
        found = of.get(job_id)
        return floor if found is None else max(floor, (found - origin).total_seconds())

    results: dict[JobId, EstimatedStart] = {}
    probe_results: dict[JobId, EstimatedStart] = {}
    ordered = sorted(
        [*ghosts, *(() if tail is None else tail.tail.probes)], key=lambda g: (g.order, g.job.id)
    )
    next_ghost = 0

    def place_ghost(probe: Ask) -> None:
        when, gpu_class, _ = place(probe, least(probe_floor_of, probe.job.id), False)
        probe_results[probe.job.id] = estimate(probe, when, gpu_class)

    def place_ghosts(up_to: float) -> None:
        """The probes up to order ``up_to``, at their place: after the jobs ahead of them."""
        nonlocal next_ghost
        while next_ghost < len(ordered) and ordered[next_ghost].order <= up_to:
            place_ghost(ordered[next_ghost])
            next_ghost += 1

    def walk(
        jobs: Sequence[Ask], runtimes: Sequence[float], times: list[float] | None = None
    ) -> None:
        """Place each job in turn; its estimate into ``results``, or its start into ``times``
        (seconds after the origin; inf: none found)."""
        ghost_order = ordered[next_ghost].order if next_ghost < len(ordered) else math.inf
        for ask, seconds in zip(jobs, runtimes, strict=True):
            if ghost_order <= ask.order:
                place_ghosts(ask.order)
                ghost_order = ordered[next_ghost].order if next_ghost < len(ordered) else math.inf
            when, gpu_class, route = place(ask, least(floor_of, ask.job.id) if floor_of else floor)
            if times is None:
                results[ask.job.id] = estimate(ask, when, gpu_class)
            if gpu_class is None or when == math.inf:
                if times is not None:
                    times.append(math.inf)
                continue
            if times is not None:
                times.append(when)
            demand = ask.demand[gpu_class]
            for _, queued, per_job in route:
                queued.work += seconds if per_job else demand * seconds

    times: list[float] | None = None
    kept = None
    if _VECTORIZED:
        leasts = [least(floor_of, ask.job.id) for ask in jobs] if floor_of else [floor] * len(jobs)
        kept = _Kept.of(projection, jobs, runtimes, leasts, tail, floor)
    if kept is None:
        walk(jobs, runtimes)
        if tail is not None:
            times = []
            walk(tail.tail.jobs, tail.runtimes.tolist(), times)
    else:
        for ask, when in zip(jobs, kept.times, strict=False):
            results[ask.job.id] = estimate(ask, when, projection.chosen[ask.job.id])
        if tail is not None:
            times = kept.times[len(jobs) :]
        for at, probe in kept.probes_at(ordered[next_ghost:]):
            kept.queued_at(at, probe)  # (only the keys this probe reads)
            place_ghost(probe)
        next_ghost = len(ordered)
    place_ghosts(math.inf)
    return results, probe_results, times


def combine_tail(
    tail: Tail,
    chosen: Mapping[JobId, str],
    scenarios: Sequence[tuple[datetime, list[float]]],
    now: datetime,
) -> dict[JobId, EstimatedStart]:
    """The tail's estimates from its four scenarios' projected starts (``project``'s third,
    with its origin; in ``forecast.SCENARIOS``' order: at the latest, likely, low, high),
    combined as ``forecast._combine`` combines a job's (``at`` the latest of them, the
    interval holding ``likely``), at once: a job's back-off holds each back."""
    held = np.full(len(tail.jobs), -math.inf)
    for index, ask in enumerate(tail.jobs):
        if ask.held_until is not None:
            held[index] = (ask.held_until - now).total_seconds()
    latest, likely, low, high = (
        np.maximum(np.asarray(times, dtype=float) + (origin - now).total_seconds(), held)
        for origin, times in scenarios
    )
    likely = np.where(np.isfinite(likely), likely, latest)
    low = np.minimum(np.where(np.isfinite(low), low, latest), likely)
    high = np.maximum(np.where(np.isfinite(high), high, latest), likely)
    at = np.maximum(latest, high)
    found: dict[JobId, EstimatedStart] = {}
    for ask, bound, most, least, upper, middle in zip(
        tail.jobs,
        latest.tolist(),
        at.tolist(),
        low.tolist(),
        high.tolist(),
        likely.tolist(),
        strict=True,
    ):
        if bound == math.inf:
            found[ask.job.id] = _NOT_FOUND
            continue
        # (timedeltas made with positional arguments: a third cheaper, tens of thousands here)
        found[ask.job.id] = EstimatedStart(
            now + timedelta(0, most),
            "",
            now + timedelta(0, least),
            now + timedelta(0, upper),
            chosen[ask.job.id],
            now + timedelta(0, middle),
            True,
        )
    return found


# Whether a scenario whose jobs keep the classes an earlier one chose projects its tail at
# once (``_Kept``: numpy) rather than job by job; the two give the same estimates (the
# tests compare them).
_VECTORIZED = True


class _Kept:
    """Jobs projected at once, when every one keeps the class an earlier scenario chose: a
    job's start is then the latest over the lines of its route of when each has done the work
    queued there ahead of it, and that work does not depend on when those jobs start. So per
    line the work ahead of each job is a running sum (numpy), and when it is done is read off
    the line's walk laid out (``_Profiles``) by a search: the same numbers as placing each job in
    turn (``project``'s walk), without a Python step per job and line."""

    def __init__(self, projection: _Projection, jobs: list[Ask]) -> None:
        self.projection = projection
        self.jobs = jobs  # in plan order: those a simulation did not start, then the tail's
        self.times: list[float] = []  # each job's start, seconds after the origin
        self.queued: list[_Queued] = []  # the work keys of the rows
        self.start: list[float] = []  # per key: its work before the first job
        # the rows by key, then job: each row's job (an index into ``jobs``) and the work
        # queued on its key up to and including it; per key, where its rows are
        self.row_jobs: np.ndarray = np.empty(0, dtype=np.intp)
        self.row_after: np.ndarray = np.empty(0)
        self.key_rows: list[tuple[int, int]] = []
        self.key_index: dict[int, int] = {}  # a work key's row by its ``_Queued``'s id

    @classmethod
    def of(
        cls,
        projection: _Projection,
        unstarted: Sequence[Ask],
        unstarted_runtimes: Sequence[float],
        unstarted_floors: Sequence[float],
        run: TailRun | None,
        floor: float,
    ) -> _Kept | None:
        """The projection of ``unstarted`` (the jobs a simulation took and did not start; none
        sooner than its floor) and then ``run``'s tail (none sooner than ``floor``) at once, or
        None when a job has no class kept yet (the first scenario chooses them) or one never
        starts (what it would have queued is not queued)."""
        grouped = _groups(unstarted, projection.chosen)
        if grouped is None:
            return None
        members, group_of, demand = grouped
        jobs = list(unstarted)
        seconds = np.asarray(unstarted_runtimes, dtype=float)
        floors = np.asarray(unstarted_floors, dtype=float)
        if run is not None and run.tail.jobs:
            tail_groups = run.tail.kept_groups(projection.chosen)
            if tail_groups is None:
                return None
            group_of = np.concatenate((group_of, tail_groups[1] + len(members)))
            members = [*members, *tail_groups[0]]
            demand = np.concatenate((demand, tail_groups[2]))
            jobs += run.tail.jobs
            seconds = np.concatenate((seconds, run.runtimes))
            floors = np.concatenate((floors, np.full(len(run.tail.jobs), floor)))
        kept = cls(projection, jobs)
        if not jobs:
            return kept
        lines: list[_Line] = []
        line_index: dict[int, int] = {}
        key_index = kept.key_index

        def indexed(route: Route) -> list[tuple[int, int, bool]]:
            """A route's lines and work keys as indexes into ``lines`` and ``kept.queued``."""
            entries = []
            for line, queued, per_job in route:
                li = line_index.setdefault(id(line), len(lines))
                if li == len(lines):
                    lines.append(line)
                ki = key_index.setdefault(id(queued), len(kept.queued))
                if ki == len(kept.queued):
                    kept.queued.append(queued)
                    kept.start.append(queued.work)
                entries.append((li, ki, per_job))
            return entries

        # A group's lines are its team's route on its class, then its user's caps' (as
        # ``job_route``'s): each distinct route is indexed once, and the groups' table
        # assembled from the routes' (a group of the jobs not started and one of the tail's
        # may share both).
        routes: dict[tuple[str, str, str], int] = {}
        users: dict[tuple[str, str], int] = {("", ""): 0}
        route_rows: list[list[tuple[int, int, bool]]] = []
        user_rows: list[list[tuple[int, int, bool]]] = [[]]  # 0: no user caps
        route_of, user_of = [], []
        for ask, gpu_class in members:
            queue = ask.queue
            key = (ask.job.team, queue.name, gpu_class)
            found = routes.get(key)
            if found is None:
                found = routes[key] = len(route_rows)
                route = projection.routes.get(key) or projection.route(ask, gpu_class)
                route_rows.append(indexed(route))
            route_of.append(found)
            user = 0
            if queue.caps_users:
                user_key = (queue.name, ask.job.user)
                user = users.get(user_key, -1)
                if user < 0:
                    user = users[user_key] = len(user_rows)
                    caps = projection.users.get(user_key) or projection.user_route(ask)
                    user_rows.append(indexed(caps))
            user_of.append(user)
        route_line, route_key, route_per_job = _entry_table(route_rows)
        user_line, user_key_of, user_per_job = _entry_table(user_rows)
        on_route = np.asarray(route_of, dtype=np.intp)
        on_user = np.asarray(user_of, dtype=np.intp)
        line_of = np.concatenate((route_line[on_route], user_line[on_user]), axis=1)
        key_of = np.concatenate((route_key[on_route], user_key_of[on_user]), axis=1)
        per_job_of = np.concatenate((route_per_job[on_route], user_per_job[on_user]), axis=1)
        width = line_of.shape[1]
        row_job, row_line, row_key, row_work = [], [], [], []
        for slot in range(width):
            on = np.flatnonzero(line_of[group_of, slot] >= 0)
            of = group_of[on]
            row_job.append(on)
            row_line.append(line_of[of, slot])
            row_key.append(key_of[of, slot])
            row_work.append(np.where(per_job_of[of, slot], seconds[on], demand[on] * seconds[on]))
        job_r = np.concatenate(row_job)
        line_r = np.concatenate(row_line)
        key_r = np.concatenate(row_key)
        work_r = np.concatenate(row_work)
        # the rows by key, then in the walk's order
        order = np.lexsort((job_r, key_r))
        job_r, line_r, key_r, work_r = job_r[order], line_r[order], key_r[order], work_r[order]
        # The work queued on each row's key ahead of its job: a running sum per key from the
        # key's work before the first job, all at once, in extended precision where the
        # platform has it: equal to adding them in turn within rounding (far below a
        # millisecond of any start; ``test_projection.py`` compares the two).
        first_of = np.concatenate(([True], key_r[1:] != key_r[:-1]))
        firsts = np.flatnonzero(first_of)
        segment = np.cumsum(first_of) - 1
        base = np.asarray(kept.start, dtype=np.longdouble)[key_r[firsts]]
        before = np.cumsum(work_r, dtype=np.longdouble) - work_r
        ahead_long = before - before[firsts][segment] + base[segment]
        ahead = ahead_long.astype(float)
        kept.row_jobs = job_r
        kept.row_after = (ahead_long + work_r).astype(float)
        kept.key_rows = [(0, 0)] * len(kept.queued)
        for first, stop in zip(firsts.tolist(), [*firsts[1:].tolist(), len(key_r)], strict=True):
            kept.key_rows[int(key_r[first])] = (first, stop)
        # when each line has done it
        when = _Profiles.of(lines).when(line_r, ahead)
        starts = floors
        np.maximum.at(starts, job_r, when)
        if not np.isfinite(starts).all():
            return None
        kept.times = starts.tolist()
        return kept

    def probes_at(self, probes: Sequence[Ask]) -> list[tuple[int, Ask]]:
        """``probes`` (in order) among the jobs, each with how many of them are ahead."""
        orders = [ask.order for ask in self.jobs]
        return [(bisect.bisect_left(orders, probe.order), probe) for probe in probes]

    def queued_at(self, jobs_ahead: int, probe: Ask) -> None:
        """Set the queued work of each key ``probe`` may queue on (on any of its classes) to
        what the first ``jobs_ahead`` jobs queued there (ahead of it; the walks of the lines
        only move forward). The other keys are left as they are: only a probe reads them, and
        each sets its own first."""
        projection = self.projection
        for gpu_class in probe.classes:
            for _, queued, _ in projection.job_route(probe, gpu_class):
                index = self.key_index.get(id(queued))
                if index is None:
                    continue  # no job queues there
                first, stop = self.key_rows[index]
                at = bisect.bisect_left(self.row_jobs, jobs_ahead, first, stop)
                queued.work = float(self.row_after[at - 1]) if at > first else self.start[index]


def _entry_table(rows: list[list[tuple[int, int, bool]]]) -> tuple[np.ndarray, ...]:
    """Rows of (line, key, per job) entries as three tables, one row each, padded with no line
    (-1)."""
    width = max((len(row) for row in rows), default=0)
    line_of = np.full((len(rows), width), -1, dtype=np.intp)
    key_of = np.zeros((len(rows), width), dtype=np.intp)
    per_job_of = np.zeros((len(rows), width), dtype=bool)
    for index, row in enumerate(rows):
        for slot, (li, ki, per_job) in enumerate(row):
            line_of[index, slot] = li
            key_of[index, slot] = ki
            per_job_of[index, slot] = per_job
    return line_of, key_of, per_job_of


def _shapes(
    jobs: Sequence[Ask],
    runtimes: Sequence[float],
    into: dict[tuple[str, ...], _Shape] | None = None,
) -> dict[tuple[str, ...], _Shape]:
    """Per class (``("c", class)``), team (``("t", team)``) and user in a queue that caps users
    (``("u", queue, user)``): the work-weighted runtime and GPU-equivalents of the jobs that
    queue there (added to ``into``'s, a ``TailRun.shapes``, which it changes: a ``TailRun``
    is projected once)."""
    shapes: dict[tuple[str, ...], _Shape] = {} if into is None else into
    # summed per group of jobs that queue on the same keys first (as ``Tail.of`` does)
    sums: dict[tuple[str, tuple[str, ...], str, str | None], list[float]] = {}
    for ask, seconds in zip(jobs, runtimes, strict=True):
        demand = ask.min_demand
        work = demand * seconds
        queue = ask.queue
        group = (ask.job.team, ask.classes, queue.name, ask.job.user if queue.caps_users else None)
        found = sums.get(group)
        if found is None:
            found = sums[group] = [0.0, 0.0, 0.0]
        found[0] += work
        found[1] += work * seconds
        found[2] += work * demand
    for group, (work, longer, wider) in sums.items():
        _add_shape(shapes, _shape_keys(*group), work, longer, wider)
    return shapes


def _add_shape(
    shapes: dict[tuple[str, ...], _Shape],
    keys: Iterable[tuple[str, ...]],
    work: float,
    longer: float,
    wider: float,
) -> None:
    """Add a group of jobs' sums (``_Shape``'s) to each of the keys it queues on."""
    for key in keys:
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _Shape()
        shape.work += work
        shape.longer += longer
        shape.wider += wider


def _shape_keys(
    team: str, classes: Sequence[str], queue: str, user: str | None
) -> list[tuple[str, ...]]:
    """The shape keys a job queues on: its team's, its classes', its user's in a queue that caps
    users (``user`` given)."""
    keys: list[tuple[str, ...]] = [("t", team)]
    keys.extend(("c", gpu_class) for gpu_class in classes)
    if user is not None:
        keys.append(("u", queue, user))
    return keys


@dataclass(slots=True)
class _Shape:
    """Sums over the jobs queued on a line: work, work × runtime, work × GPU-equivalents."""

    work: float = 0.0
    longer: float = 0.0
    wider: float = 0.0

    def residual(self, capacity: int, per_job: bool) -> float:
        """What a job in flight on a line of ``capacity`` has left on average when one ends:
        P jobs side by side, evenly spread, have (P - 1) / P of half a runtime left — half a
        runtime on a class of hundreds of GPUs, nothing on a quota that holds one job at a
        time."""
        if not self.work:
            return 0.0
        runtime = self.longer / self.work
        width = 1.0 if per_job else self.wider / self.work
        parallel = capacity / width if width else 0.0
        return runtime / 2 * (1 - 1 / parallel) if parallel > 1 else 0.0


class _Projection:
    """The lines of ``project`` and the routes jobs take over them."""

    def __init__(
        self,
        state: State,
        schedule: Iterable[Interval],
        origin: datetime,
        shapes: dict[tuple[str, ...], _Shape],
    ) -> None:
        self.state = state
        self.origin = origin
        self.shapes = shapes
        # what jobs may hold of each class: not what is used outside the portal, nor reserved
        # GPUs their holders leave idle (nodes coming back are added by ``project``)
        self.capacity = {
            name: max(0, amount - state.outside[name] - state.res_idle_total[name])
            for name, amount in state.class_capacity.items()
        }
        # what holds each line's key, as changes in time: ("c", class); a team's on a class:
        # ("n", ...) as nominal, ("q", ...) on its quota (nominal or borrowed), ("r", ...) on
        # its reservations; ("ue", queue, user) in GPU-eq and ("uj", queue, user) in jobs
        self.changes: dict[tuple[str, ...], list[tuple[float, int]]] = {}
        changes = self.changes
        capped = {name for name, terms in state.queues.items() if terms.caps_users}
        for start, end, gpu_class, team, queue, user, eq, kind in schedule:
            held: list[tuple[tuple[str, ...], int]] = [(("c", gpu_class), eq)]
            if team:  # not a node away for maintenance, nor a part holding devices only
                if queue in capped:
                    held += [(("ue", queue, user), eq), (("uj", queue, user), 1)]
                if kind is CapacityKind.RESERVED:
                    held.append((("r", team, gpu_class), eq))
                else:
                    held.append((("q", team, gpu_class), eq))
                    if kind is CapacityKind.NOMINAL:
                        held.append((("n", team, gpu_class), eq))
            for key, amount in held:
                into = changes.get(key)
                if into is None:
                    into = changes[key] = []
                into.append((start, amount))
                into.append((end, -amount))
        for timeline in changes.values():
            timeline.sort()
        self.lines: dict[tuple[object, ...], _Line] = {}  # by key and capacity
        self.queued: dict[tuple[str, ...], _Queued] = {}
        self.routes: dict[tuple[str, str, str], Route] = {}  # by team, queue, class
        self.users: dict[tuple[str, str], Route] = {}  # by queue, user
        self.options: dict[int, list[tuple[str, Route]]] = {}  # by ``Ask.key`` (``options_of``)
        self.chosen: dict[JobId, str] = {}  # the class a job was placed on (``place``)

    def place(
        self, ask: Ask, least: float = 0.0, keep: bool = True
    ) -> tuple[float, str | None, Route]:
        """Where ``ask`` starts first, no sooner than ``least``: seconds after the origin, the
        class and the lines it queues on there. A job (``keep``) keeps the class an earlier
        scenario started it on (``chosen``: simulated or projected): scenarios differ in how
        long jobs run, not where; unless that class gives it no start at all here."""
        queue = ask.queue
        team = ask.job.team
        users: Route = []
        earliest = least  # and what its user's caps in the queue allow, on any class
        if queue.caps_users:
            users = self.users.get((queue.name, ask.job.user)) or self.user_route(ask)
            for line, queued, _ in users:
                at = line.when(queued.work)
                if at > earliest:
                    earliest = at
        best, chosen, chosen_route = math.inf, None, users
        kept = self.chosen.get(ask.job.id) if keep else None
        keeping = kept is not None
        if kept is None:
            candidates = self.options.get(ask.key) or self.options_of(ask)
        else:
            route = self.routes.get((team, queue.name, kept)) or self.route(ask, kept)
            candidates = [(kept, route)]
        while True:
            for gpu_class, route in candidates:
                when = earliest
                for line, queued, _ in route:
                    work = queued.work
                    if work <= line.ready:
                        at = line.at
                    elif line.free and (at := line.at + (work - line.ready) / line.free) <= (
                        line.end
                    ):
                        pass  # within the walk's segment
                    else:
                        at = line.when(work)
                    if at > when:
                        when = at
                if when < best:
                    best, chosen, chosen_route = when, gpu_class, route
            if chosen is not None or not keeping:
                break
            # The class kept has no start here: the first scenario started the job on capacity
            # a projection does not count (a reservation its queue is not limited to, say). It
            # chooses again in this scenario only (``chosen`` is not changed, so the scenarios
            # after it keep the first one's class as well).
            candidates = self.options.get(ask.key) or self.options_of(ask)
            keeping = False
        if keep and kept is None and chosen is not None:
            self.chosen[ask.job.id] = chosen
        if users and chosen is not None:
            chosen_route = [*chosen_route, *users]
        return best, chosen, chosen_route

    def options_of(self, ask: Ask) -> list[tuple[str, Route]]:
        """Each class ``ask`` may use and its route there, the same for every ask of its key
        (``Ask.key``: its team, queue and capability among them)."""
        routes = self.routes
        team, queue = ask.job.team, ask.queue.name
        found = self.options[ask.key] = [
            (gpu_class, routes.get((team, queue, gpu_class)) or self.route(ask, gpu_class))
            for gpu_class in ask.classes
        ]
        return found

    def job_route(self, ask: Ask, gpu_class: str) -> Route:
        """Every line ``ask`` queues on on ``gpu_class``: its route there and its user's caps."""
        queue = ask.queue
        route = self.routes.get((ask.job.team, queue.name, gpu_class)) or self.route(ask, gpu_class)
        if not queue.caps_users:
            return route
        users = self.users.get((queue.name, ask.job.user)) or self.user_route(ask)
        return [*route, *users]

    def estimate(self, ask: Ask, when: float, gpu_class: str | None) -> EstimatedStart:
        if gpu_class is None or when == math.inf:
            return _NOT_FOUND
        at = self.origin + timedelta(0, when)  # positional: cheaper, one per job
        if ask.held_until is not None and ask.held_until > at:
            at = ask.held_until
        return EstimatedStart(at, "", None, None, gpu_class, projected=True)

    def route(self, ask: Ask, gpu_class: str) -> Route:
        """The lines a job of the ask's team and queue queues on on ``gpu_class``: the class's
        and its team's entitlement's (``diagnose.entitlement``'s rule: a job that may not
        borrow stays within the nominal quota, and every job within nominal + borrowing limit;
        a reservation-only queue's within the team's reservations, while they are open)."""
        queue = ask.queue
        team = ask.job.team
        state = self.state
        key = (team, gpu_class)
        nominal = state.nominal.get(key, 0)
        capacity = self.capacity[gpu_class]
        if queue.reservation_only:  # its reserved GPUs the others may not use are its own
            capacity += state.res_idle_total[gpu_class]
        found = [self._on(("c", gpu_class), capacity, "c", gpu_class)]
        if queue.reservation_only:
            found.append(self._reserved(team, queue.name, gpu_class))
        else:
            quota = nominal + state.borrow_limit.get(key, 0)
            found.append(self._on(("q", team, gpu_class), quota, "t", team))
            if not queue.can_borrow:
                found.append(self._on(("n", team, gpu_class), nominal, "t", team))
        if not self.capacity.get(gpu_class):
            found = [(_NOWHERE, _Queued(), False)]  # no node of the class may take jobs
        self.routes[(team, queue.name, gpu_class)] = found
        return found

    def user_route(self, ask: Ask) -> Route:
        """The lines of the ask's user's caps in its queue (on running jobs, on GPU-eq)."""
        queue = ask.queue
        user = ask.job.user
        found = []
        if queue.max_running_jobs_per_user is not None:
            cap = queue.max_running_jobs_per_user
            found.append(self._on(("uj", queue.name, user), cap, "u", queue.name, user))
        if queue.max_gpu_eq_per_user is not None:
            cap = self.state.eq_units(queue.max_gpu_eq_per_user)
            found.append(self._on(("ue", queue.name, user), cap, "u", queue.name, user))
        self.users[(queue.name, user)] = found
        return found

    def _on(self, key: tuple[str, ...], capacity: int, *shape: str) -> tuple[_Line, _Queued, bool]:
        """The line of ``key`` with ``capacity`` (one per capacity), and the work queued on
        ``key``; ``shape`` names the jobs whose runtimes and sizes say how much of a runtime a
        job in flight there has left."""
        per_job = key[0] == "uj"
        line = self.lines.get((*key, capacity))
        if line is None:
            found = self.shapes.get(shape)
            residual = found.residual(capacity, per_job) if found else 0.0
            changes = self.changes.get(key, [])
            line = self.lines[(*key, capacity)] = _Line.of(capacity, changes, residual)
        queued = self.queued.get(key)
        if queued is None:
            queued = self.queued[key] = _Queued()
        return line, queued, per_job

    def _reserved(self, team: str, queue: str, gpu_class: str) -> tuple[_Line, _Queued, bool]:
        """A reservation-only queue's line: the team's reservations it may use on the class,
        each counted while it is open (a window that opens later or closes holds its amount
        before or after)."""
        key = ("r", team, queue, gpu_class)
        state = self.state
        capacity = 0
        windows: list[tuple[float, int]] = []
        for rid in state.holder_reservations(team, queue, gpu_class):
            reservation = state.reservations[rid]
            amount = state.res_amount[rid]
            capacity += amount
            if reservation.start is not None and reservation.start > self.origin:
                windows += [
                    (0.0, amount),
                    ((reservation.start - self.origin).total_seconds(), -amount),
                ]
            if reservation.end is not None:
                closes = max(0.0, (reservation.end - self.origin).total_seconds())
                windows += [(closes, amount), (math.inf, -amount)]
        line = self.lines.get((*key, capacity))
        if line is None:
            changes = sorted([*self.changes.get(("r", team, gpu_class), []), *windows])
            found = self.shapes.get(("t", team))
            residual = found.residual(capacity, False) if found and capacity else 0.0
            line = self.lines[(*key, capacity)] = _Line.of(capacity, changes, residual)
        queued = self.queued.get(key)
        if queued is None:
            queued = self.queued[key] = _Queued()
        return line, queued, False


# A class with no node that may take jobs: nothing starts there.
_NOWHERE = _Line(0, [], 0.0, ready=-1.0)

_NOT_FOUND = EstimatedStart(at=None, why_unknown="no start found: no capacity it may use frees up")
