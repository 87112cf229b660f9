"""Conservative backfill: the head-of-queue reservations (shadows) of blocked jobs, and the fits
under them.

A blocked job gets a shadow (``maybe_shadow``, ``reserve``): the earliest time it fits for its
whole runtime on the class's capacity and its team's quota, behind the shadows ahead of it. A
later job may start only where it delays none of them (``fit``, ``quota_guard``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from queues.admission.asks import Ask
from queues.admission.diagnose import entitlement
from queues.admission.fit import Fit, Option, fit_class
from queues.admission.pass_state import Pass, QuotaShadow, Shadow, versions
from queues.admission.snapshot import (
    CapacityKind,
    JobId,
    PreemptionClass,
)
from queues.admission.state import Alloc, Pool, State, place

# ---------------------------------------------------------------------- conservative backfill

# Head-of-queue reservations one pass makes at most per class: the first blocked jobs in plan
# order get one each; jobs behind them start wherever they fit without delaying any of those.
RESERVATION_DEPTH = 32


def maybe_shadow(run: Pass, ask: Ask) -> None:
    """Give a blocked job its head-of-queue reservation on the first class (cost order) where
    one can be found with what runs now and the reservations ahead of it, whatever blocks it:
    capacity or its team's quota."""
    state = run.state
    # Whether a reservation can be found depends on what is held and what is reserved: a job
    # like one that found none finds none until either changes.
    tried = (ask.key, state.changes, run.reserved)
    if tried in run.no_shadow:
        return
    run.no_shadow.add(tried)
    for gpu_class in ask.classes:
        pool = state.pools.get((gpu_class, ask.mode, ask.profile))
        if pool is None or len(run.shadows.get(gpu_class, ())) >= RESERVATION_DEPTH:
            continue
        options = entitlement(state, ask, gpu_class)
        if options:
            option = options[0]
        elif ask.queue.reservation_only or not open_to(state, ask, gpu_class):
            continue
        else:
            kind = CapacityKind.BORROWED if ask.queue.can_borrow else CapacityKind.NOMINAL
            lend = ask.queue.can_borrow and ask.queue.preemption is PreemptionClass.PREEMPTIBLE
            option = (kind, None, lend)
        if _reserve(run, ask, gpu_class, pool, option):
            run.reserved += 1
            state.class_version[gpu_class] += 1
            return


@dataclass(slots=True)
class _QuotaWalk:
    """The team's quota use of one class over time, for a reservation."""

    team: str
    demand: int
    nominal: int
    cap: int
    needs_nominal: bool
    held: int
    total: int

    @classmethod
    def start(cls, state: State, ask: Ask, gpu_class: str) -> _QuotaWalk:
        key = (ask.job.team, gpu_class)
        nominal = state.nominal.get(key, 0)
        held = state.nominal_jobs_eq.get(key, 0)
        return cls(
            team=ask.job.team,
            demand=ask.demand[gpu_class],
            nominal=nominal,
            cap=nominal + state.borrow_limit.get(key, 0),
            needs_nominal=not ask.queue.can_borrow,
            held=held,
            total=held + state.borrowed_jobs_eq.get(key, 0),
        )

    def ended(self, alloc: Alloc) -> None:
        if alloc.team != self.team or alloc.kind is CapacityKind.RESERVED:
            return
        self.total -= alloc.eq
        if alloc.kind is CapacityKind.NOMINAL:
            self.held -= alloc.eq

    def add(self, quota: QuotaShadow, sign: int) -> None:
        self.total += sign * quota.demand
        if quota.nominal:
            self.held += sign * quota.demand

    def fits(self, more: int = 0, more_nominal: int = 0) -> bool:
        """The same rule as ``entitlement`` (nominal within nominal, everything within the cap),
        with ``more`` (``more_nominal`` within nominal) reserved by others meanwhile."""
        if self.total + more + self.demand > self.cap:
            return False
        return not self.needs_nominal or self.held + more_nominal + self.demand <= self.nominal


def _class_ends(state: State, gpu_class: str) -> list[tuple[datetime, Alloc, int]]:
    """The class's jobs by end time with the GPU-eq each holds on eligible nodes, kept for as
    long as the class does not change (every reservation of a pass walks it)."""
    key = ("ends", gpu_class, state.changes)
    cached = state.memo.get(key)
    if cached is None:
        cached = [
            (a.end, a, sum(s.eq for s in a.spots if s.pool.eligible[s.local]))
            for a in sorted(state.class_allocs[gpu_class].values(), key=lambda a: (a.end, a.job_id))
        ]
        state.memo[key] = cached
    assert isinstance(cached, list)
    return cached


_ENDS, _RESERVED_ENDS, _RESERVED_STARTS = 0, 1, 2
_Event = tuple[datetime, int, Any]


def _event_order(event: _Event) -> tuple[datetime, int]:
    return event[0], event[1]


@dataclass(slots=True)
class _Room:
    """What one reservation walk sees at a moment: the class's usable GPU-eq, the free devices
    per node of the job's pool, and its team's quota use (None for a reservation's capacity)."""

    pool: Pool
    rid: int | None
    usable: int
    free: list[int]
    quota: _QuotaWalk | None

    def apply(self, event: _Event) -> bool:
        """Apply one event; True if it frees something."""
        _, what, item = event
        if what == _ENDS:
            alloc, eligible_eq = item
            if not (alloc.kind is CapacityKind.RESERVED and alloc.reservation_id != self.rid):
                self.usable += eligible_eq
            for spot in alloc.spots:
                if spot.pool is self.pool:
                    self.free[spot.local] += spot.devices
            if self.quota is not None:
                self.quota.ended(alloc)
            return True
        sign = 1 if what == _RESERVED_ENDS else -1
        if isinstance(item, Shadow):
            self.usable += sign * item.eq
            if item.pool is self.pool:
                for local, devices in item.used:
                    self.free[local] += sign * devices
        elif self.quota is not None:
            self.quota.add(item, -sign)
        return sign > 0

    def fits(self, demand: int) -> bool:
        return demand <= self.usable and (self.quota is None or self.quota.fits())

    def at_starts(self, events: list[_Event]) -> list[_AtStart]:
        """The room at each time a shadow starts (from a copy of this one, walking ``events``):
        the usable GPU-eq, the team's quota use, and the free devices of the nodes that shadow
        takes. Between two such times room only grows, so the least room over any span is the
        room at its start or at one of these."""
        walk = None if self.quota is None else replace(self.quota)
        room = _Room(self.pool, self.rid, self.usable, list(self.free), walk)
        found: list[_AtStart] = []
        last = max((e[0] for e in events if e[1] == _RESERVED_STARTS), default=None)
        index = 0
        while last is not None and index < len(events) and events[index][0] <= last:
            when = events[index][0]
            touched: list[int] = []
            starts = False
            while index < len(events) and events[index][0] == when:
                event = events[index]
                room.apply(event)
                if event[1] == _RESERVED_STARTS:
                    starts = True
                    if isinstance(event[2], Shadow) and event[2].pool is self.pool:
                        touched.extend(local for local, _ in event[2].used)
                index += 1
            if starts:
                nodes = {local: room.free[local] for local in touched}
                total, held = (walk.total, walk.held) if walk is not None else (0, 0)
                found.append(_AtStart(when, room.usable, total, held, nodes))
        return found


@dataclass(slots=True)
class _AtStart:
    time: datetime
    usable: int
    total: int
    held: int
    free: dict[int, int]


def _class_end_events(state: State, gpu_class: str) -> list[_Event]:
    key = ("end events", gpu_class, state.changes)
    cached = state.memo.get(key)
    if cached is None:
        cached = [(end, _ENDS, (alloc, eq)) for end, alloc, eq in _class_ends(state, gpu_class)]
        state.memo[key] = cached
    assert isinstance(cached, list)
    return cached


def _reserve(run: Pass, ask: Ask, gpu_class: str, pool: Pool, option: Option) -> bool:
    """Reserve for ``ask`` the earliest time from which it fits ``gpu_class`` for its whole
    runtime (limit), given that running jobs end at their limits and the reservations already
    made keep theirs (and, unless the option is a reservation's, its team's quota would take
    it); False if there is none with what runs now.

    The walk visits the times something ends or a reservation ends; from each, the job must fit
    the least room until it would end (the room shrinks only where a reservation starts)."""
    state = run.state
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    kind, rid, lend = option
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    quota = None if kind is CapacityKind.RESERVED else _QuotaWalk.start(state, ask, gpu_class)
    room = _Room(pool, rid, state.usable(gpu_class, kind, rid, lend, own), list(pool.free), quota)
    shadows = run.shadows.setdefault(gpu_class, [])
    quotas = run.quota_shadows.get((ask.job.team, gpu_class), []) if quota else []
    reservations: list[Shadow | QuotaShadow] = [*shadows, *quotas]
    held: list[_Event] = []
    for reserved in reservations:
        held.append((reserved.time, _RESERVED_STARTS, reserved))
        held.append((reserved.end, _RESERVED_ENDS, reserved))
    held.sort(key=_event_order)
    events = list(_class_end_events(state, gpu_class))
    for event in held:  # few: into the cached list of ends, where they belong
        bisect.insort(events, event, key=_event_order)
    at_starts = room.at_starts(events) if held else []
    start_times = [a.time for a in at_starts]
    index = 0
    while index < len(events):
        when = events[index][0]
        released = False
        while index < len(events) and events[index][0] == when:
            released = room.apply(events[index]) or released
            index += 1
        run.walked += 1
        if not released or not room.fits(demand):
            continue
        end = when + ask.runtime
        window = at_starts[
            bisect.bisect_right(start_times, when) : bisect.bisect_left(start_times, end)
        ]
        free = room.free
        if window:
            if demand > min(a.usable for a in window):
                continue
            if quota is not None:
                more = max(a.total for a in window) - quota.total
                more_nominal = max(a.held for a in window) - quota.held
                if not quota.fits(max(more, 0), max(more_nominal, 0)):
                    continue
            free = list(free)
            for at in window:
                for local, value in at.free.items():
                    if value < free[local]:
                        free[local] = value
        placement = place(pool, shape, free)
        if placement is None:
            continue
        used = [(local, pods * shape.devices) for local, pods in placement]
        extra = list(room.free)
        for local, devices in used:
            extra[local] -= devices
        for shadow in shadows:
            if when <= shadow.time < end:
                shadow.eq_extra -= demand
                if shadow.pool is pool:
                    for local, devices in used:
                        shadow.extra[local] -= devices
        shadows.append(
            Shadow(ask.job.id, when, end, pool, used, demand, extra, room.usable - demand)
        )
        if quota is not None:
            for reserved in quotas:
                if when <= reserved.time < end:
                    reserved.total_room -= demand
                    if quota.needs_nominal and reserved.nominal_room is not None:
                        reserved.nominal_room -= demand
            nominal_room = quota.nominal - quota.held - demand if quota.needs_nominal else None
            run.quota_shadows.setdefault((ask.job.team, gpu_class), []).append(
                QuotaShadow(
                    ask.job.id,
                    when,
                    end,
                    demand,
                    quota.needs_nominal,
                    quota.cap - quota.total - demand,
                    nominal_room,
                )
            )
        return True
    return False


def fit_shadowed(
    run: Pass, ask: Ask, gpu_class: str, options: list[Option], reserved: bool = True
) -> Fit | None:
    """``fit_class`` under the head-of-queue reservations ahead (unless not ``reserved``): a job
    that would still run when one starts may use only what that one leaves."""
    state = run.state
    if not reserved:
        return fit_class(state, ask, gpu_class, options)
    options = quota_guard(run, ask, gpu_class, options)
    if not options:
        return None
    end = state.now + ask.runtime
    shadows = [s for s in run.shadows.get(gpu_class, ()) if s.time < end]
    if not shadows:
        return fit_class(state, ask, gpu_class, options)
    # what the shadows leave is the same for every job they constrain alike: worked out once
    # per set of shadows and version of the class
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    key = (gpu_class, id(pool), state.class_version[gpu_class], *(s.job_id for s in shadows))
    left = run.views.get(key)
    if left is None:
        left = run.views[key] = left_by(state, pool, shadows)
    return fit_class(state, ask, gpu_class, options, *left)


def fit_under(
    state: State, ask: Ask, gpu_class: str, options: list[Option], shadows: list[Shadow]
) -> Fit | None:
    if not shadows:
        return fit_class(state, ask, gpu_class, options)
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    return fit_class(state, ask, gpu_class, options, *left_by(state, pool, shadows))


def left_by(state: State, pool: Pool | None, shadows: list[Shadow]) -> tuple[list[int] | None, int]:
    """The free devices per node of ``pool`` (None: the pool's own) and the class's GPU-eq that
    a job running past every one of ``shadows`` may use."""
    view: list[int] | None = None
    for shadow in shadows:
        if shadow.pool is pool:
            if view is None:
                view = list(pool.free)
            for local, extra in enumerate(shadow.extra):
                if extra < view[local]:
                    view[local] = extra
    return view, min(s.eq_extra for s in shadows)


def quota_guard(run: Pass, ask: Ask, gpu_class: str, options: list[Option]) -> list[Option]:
    """``options`` without the quota ones that would delay a reserved job of the team ahead
    (its ``QuotaShadow``): a job that ends before such a job starts may use any quota."""
    if all(option[0] is CapacityKind.RESERVED for option in options):
        return options
    end = run.state.now + ask.runtime
    quotas = [q for q in run.quota_shadows.get((ask.job.team, gpu_class), ()) if q.time < end]
    if not quotas:
        return options
    demand = ask.demand[gpu_class]
    total_room = min(q.total_room for q in quotas)
    nominal_rooms = [q.nominal_room for q in quotas if q.nominal_room is not None]
    kept = []
    for option in options:
        kind = option[0]
        if kind is not CapacityKind.RESERVED:
            if demand > total_room:
                continue
            if kind is CapacityKind.NOMINAL and nominal_rooms and demand > min(nominal_rooms):
                continue
        kept.append(option)
    return kept


def held_for(run: Pass, ask: Ask) -> tuple[JobId | None, bool]:
    """The job ahead whose head-of-queue reservation keeps ``ask`` from starting, and whether
    it is held by its team's quota (True) or by the class's capacity (False): the first in plan
    order that alone leaves too little, else the first the job would overlap."""
    state = run.state
    key = ("held", ask.key, versions(state, ask))
    cached = run.held.get(key)
    if cached is None:
        cached = run.held[key] = _find_holder(run, ask)
    return cached


def _find_holder(run: Pass, ask: Ask) -> tuple[JobId | None, bool]:
    state = run.state
    end = state.now + ask.runtime
    first: tuple[JobId | None, bool] = (None, False)
    for gpu_class in ask.classes:
        demand = ask.demand[gpu_class]
        for quota in run.quota_shadows.get((ask.job.team, gpu_class), ()):
            if end > quota.time:
                if demand > quota.total_room or (
                    quota.nominal_room is not None and demand > quota.nominal_room
                ):
                    return quota.job_id, True
                first = first if first[0] is not None else (quota.job_id, True)
        options = entitlement(state, ask, gpu_class)
        for shadow in run.shadows.get(gpu_class, ()):
            if end > shadow.time:
                if options and fit_under(state, ask, gpu_class, options, [shadow]) is None:
                    return shadow.job_id, False
                first = first if first[0] is not None else (shadow.job_id, False)
    return first


def open_to(state: State, ask: Ask, gpu_class: str) -> bool:
    if state.holder_reservations(ask.job.team, ask.queue.name, gpu_class):
        return True
    if ask.queue.reservation_only:
        return False
    key = (ask.job.team, gpu_class)
    limit = state.borrow_limit.get(key, 0) if ask.queue.can_borrow else 0
    return state.nominal.get(key, 0) + limit > 0
