"""The reservation walk the engine used before its search (``backfill.reserve``): every end
of the class from now, one after the other. Kept here as the oracle the search is compared with
(test_backfill_search.py): the two must reserve the same start, nodes and room."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from queues.admission.asks import Ask
from queues.admission.fit import Option
from queues.admission.pass_state import Pass, QuotaShadow, Shadow
from queues.admission.snapshot import CapacityKind
from queues.admission.state import Alloc, Pool, State, place


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
    """The class's jobs by end time with the GPU-eq each holds on eligible nodes (the engine
    keeps them per class version; this reference works them out each time)."""
    return [
        (a.end, a, sum(s.eq for s in a.spots if s.pool.eligible[s.local]))
        for a in sorted(state.class_allocs[gpu_class].values(), key=lambda a: (a.end, a.job_id))
    ]


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
    return [(end, _ENDS, (alloc, eq)) for end, alloc, eq in _class_ends(state, gpu_class)]


def reserve_by_walk(run: Pass, ask: Ask, gpu_class: str, pool: Pool, option: Option) -> bool:
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
        # the nodes its earlier reservation chose first, as the search does (``Pass.kept``)
        placement = place(pool, shape, free, kept=run.kept_nodes(ask.job.id, gpu_class))
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
            Shadow(
                ask.job.id, when, end, pool, used, demand, extra, room.usable - demand, placement
            )
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
