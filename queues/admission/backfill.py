"""Conservative backfill: the head-of-queue reservations (shadows) of blocked jobs, and the fits
under them.

A blocked job gets a shadow (``maybe_shadow``, ``reserve``): the earliest time it fits for its
whole runtime on the class's capacity and its team's quota, behind the shadows ahead of it. A
later job may start only where it delays none of them (``fit``, ``quota_guard``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
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
from queues.admission.state import Alloc, Placement, Pool, Shape, State, place

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


@dataclass(slots=True)
class _Profile:
    """A class's running jobs by the time they end at the latest, as running sums: for one state
    version, what every reservation of a pass reads by a search (``bisect``) instead of walking
    each end from now."""

    times: list[datetime]
    ends: list[tuple[Alloc, int]]  # (job, its GPU-eq on eligible nodes), by end then job id
    sums: dict[object, Any] = field(default_factory=dict)

    def freed(self, rid: int | None) -> list[int]:
        """The GPU-eq on eligible nodes that the first ``i`` ends give back to a job on
        reservation ``rid`` (None: on quota): all but what other reservations hold."""
        key = ("rid", rid)
        found = self.sums.get(key)
        if found is None:
            found = [0]
            for alloc, eq in self.ends:
                counts = alloc.kind is not CapacityKind.RESERVED or alloc.reservation_id == rid
                found.append(found[-1] + (eq if counts else 0))
            self.sums[key] = found
        return found

    def team_freed(self, team: str) -> _TeamEnds:
        """The ends of ``team``'s jobs on its quota (jobs on reserved capacity count against
        none), for every team at once."""
        teams = self.sums.get("teams")
        if teams is None:
            teams = {}
            for index, (alloc, _) in enumerate(self.ends):
                if alloc.kind is CapacityKind.RESERVED:
                    continue
                ends = teams.get(alloc.team)
                if ends is None:
                    ends = teams[alloc.team] = _TeamEnds([], [0], [0])
                ends.indices.append(index)
                ends.total.append(ends.total[-1] + alloc.eq)
                nominal = alloc.eq if alloc.kind is CapacityKind.NOMINAL else 0
                ends.nominal.append(ends.nominal[-1] + nominal)
            self.sums["teams"] = teams
        return teams.get(team) or _NO_ENDS

    def node_freed(self, pool: Pool) -> dict[int, tuple[list[datetime], list[int]]]:
        """Per local node of ``pool`` that jobs hold: when they end, and the devices given back
        by then."""
        key = ("nodes", id(pool))
        found = self.sums.get(key)
        if found is None:
            found = {}
            for when, (alloc, _) in zip(self.times, self.ends, strict=True):
                for spot in alloc.spots:
                    if spot.pool is pool:
                        times, freed = found.setdefault(spot.local, ([], []))
                        times.append(when)
                        freed.append((freed[-1] if freed else 0) + spot.devices)
            self.sums[key] = found
        return found

    def pool_freed(self, pool: Pool) -> list[int]:
        """The devices on eligible nodes of ``pool`` that the first ``i`` ends give back."""
        key = ("pool", id(pool))
        found = self.sums.get(key)
        if found is None:
            found = [0]
            for alloc, _ in self.ends:
                devices = sum(
                    s.devices for s in alloc.spots if s.pool is pool and pool.eligible[s.local]
                )
                found.append(found[-1] + devices)
            self.sums[key] = found
        return found

    def node_counts(self, pool: Pool) -> dict[int, tuple[list[int], list[int]]]:
        """``node_freed`` by count of ends rather than time: after how many ends of the class
        each node of ``pool`` got back how many devices."""
        key = ("node counts", id(pool))
        found = self.sums.get(key)
        if found is None:
            found = {
                local: ([bisect.bisect_right(self.times, when) for when in times], freed)
                for local, (times, freed) in self.node_freed(pool).items()
            }
            self.sums[key] = found
        return found

    def ready_count(self, pool: Pool, local: int, devices: int) -> int:
        """After how many ends node ``local`` of ``pool`` has ``devices`` free, not counting
        reservations (``len(times) + 1``: never)."""
        short = devices - pool.free[local]
        if short <= 0:
            return 0
        counts, freed = self.node_counts(pool).get(local, ((), ()))
        index = bisect.bisect_left(freed, short)
        return counts[index] if index < len(counts) else len(self.times) + 1

    def most_on_a_node(self, pool: Pool) -> int:
        """The most devices the portal may use on one eligible node of ``pool``."""
        key = ("most", id(pool))
        found = self.sums.get(key)
        if found is None:
            found = self.sums[key] = max(
                (cap for cap, ok in zip(pool.cap, pool.eligible, strict=True) if ok), default=0
            )
        return found

    def ready_counts(self, pool: Pool, devices: int) -> list[tuple[int, int]]:
        """``ready_count`` of every eligible node of ``pool``, soonest first."""
        key = ("ready", id(pool), devices)
        found = self.sums.get(key)
        if found is None:
            found = sorted(
                (self.ready_count(pool, local, devices), local)
                for local, eligible in enumerate(pool.eligible)
                if eligible
            )
            self.sums[key] = found
        return found

    def node_free(self, pool: Pool, local: int, when: datetime) -> int:
        """The free devices of one node of ``pool`` once every job that ends by ``when`` has."""
        held = self.node_freed(pool).get(local)
        if held is None:
            return pool.free[local]
        count = bisect.bisect_right(held[0], when)
        return pool.free[local] + (held[1][count - 1] if count else 0)

    def free_at(self, pool: Pool, when: datetime) -> list[int]:
        """The free devices per node of ``pool`` once every job that ends by ``when`` has."""
        free = list(pool.free)
        for local, (times, freed) in self.node_freed(pool).items():
            count = bisect.bisect_right(times, when)
            if count:
                free[local] += freed[count - 1]
        return free


@dataclass(slots=True)
class _TeamEnds:
    """A team's jobs among a class's ends: their places in the profile, and the quota (in all,
    within nominal) given back after each."""

    indices: list[int]
    total: list[int]
    nominal: list[int]

    def freed(self, count: int) -> tuple[int, int]:
        """What the first ``count`` ends of the class give back of the team's quota."""
        mine = bisect.bisect_left(self.indices, count)
        return self.total[mine], self.nominal[mine]

    def first_count(self, sums: list[int], need: int, lo: int, hi: int) -> int:
        """The fewest ends in ``lo..hi`` after which ``sums`` (``total`` or ``nominal``) reaches
        ``need`` (``hi + 1``: none)."""
        mine = bisect.bisect_left(sums, need)
        if mine >= len(sums):
            return hi + 1
        found = self.indices[mine - 1] + 1 if mine else lo
        return min(max(lo, found), hi + 1)


_NO_ENDS = _TeamEnds([], [0], [0])


def _profile(state: State, gpu_class: str) -> _Profile:
    """The class's ``_Profile``, kept for as long as the class does not change."""
    key = (gpu_class, state.class_changes[gpu_class])
    cached = state.profiles.get(key)
    if cached is None:
        allocs = sorted(state.class_allocs[gpu_class].values(), key=lambda a: (a.end, a.job_id))
        ends = [(a, sum(s.eq for s in a.spots if s.pool.eligible[s.local])) for a in allocs]
        cached = state.profiles[key] = _Profile([a.end for a in allocs], ends)
    return cached


@dataclass(slots=True)
class _Held:
    """What the reservations already made hold from ``time`` on (until the next ``_Held``): the
    class's GPU-eq, the team's quota (in all and within nominal), the reservations that hold
    devices of the job's pool; and whether one starts at ``time`` (and on which of its nodes)."""

    time: datetime | None  # None: from the start
    eq: int
    quota: int
    nominal: int
    on_pool: list[Shadow]
    starts: bool = False
    touched: list[int] = field(default_factory=list)


def _held_over_time(shadows: list[Shadow], quotas: list[QuotaShadow], pool: Pool) -> list[_Held]:
    changes: dict[datetime, list[tuple[int, Shadow | QuotaShadow]]] = {}
    reservations: list[Shadow | QuotaShadow] = [*shadows, *quotas]
    for reserved in reservations:
        changes.setdefault(reserved.time, []).append((1, reserved))
        changes.setdefault(reserved.end, []).append((-1, reserved))
    held = [_Held(None, 0, 0, 0, [])]
    for when in sorted(changes):
        last = held[-1]
        step = _Held(when, last.eq, last.quota, last.nominal, last.on_pool)
        for sign, reserved in changes[when]:
            step.starts = step.starts or sign > 0
            if isinstance(reserved, Shadow):
                step.eq += sign * reserved.eq
                if reserved.pool is pool:
                    if step.on_pool is last.on_pool:
                        step.on_pool = list(last.on_pool)
                    if sign > 0:
                        step.on_pool.append(reserved)
                        step.touched.extend(local for local, _ in reserved.used)
                    else:
                        step.on_pool.remove(reserved)
            else:
                step.quota += sign * reserved.demand
                if reserved.nominal:
                    step.nominal += sign * reserved.demand
        held.append(step)
    return held


@dataclass(slots=True)
class _AtStart:
    """The room at a time a reservation starts: between two such times room only grows, so
    the least room over any span is the room at its start or at one of these."""

    time: datetime
    usable: int
    total: int
    held: int
    free: dict[int, int]  # the free devices of the nodes the reservations starting then take


@dataclass(slots=True)
class _Search:
    """One reservation's search (see ``_reserve``): the job's demand and the room it starts
    from, read at any time through the class's ``_Profile`` and the reservations' ``_Held``."""

    run: Pass
    ask: Ask
    gpu_class: str
    pool: Pool
    demand: int
    usable: int  # the class's GPU-eq the job may use now
    quota: _QuotaWalk | None
    profile: _Profile
    freed: list[int]
    team: _TeamEnds
    pool_freed: list[int]
    pool_need: int  # devices the pool's eligible nodes must free besides those free now
    steps: list[_Held]
    total0: int = 0
    held0: int = 0
    at_starts: list[_AtStart] | None = None
    start_times: list[datetime] = field(default_factory=list)
    free: list[int] | None = None  # the pool's free devices after ``count`` ends
    count: int = 0
    unplaced: _Held | None = None  # the step of the last attempt that found no nodes
    unplaced_count: int = 0  # and after how many ends
    found: _Found | None = None  # the reservation made

    def room(self, count: int, step: _Held) -> int:
        """The class's GPU-eq the job may use once ``count`` ends have happened, under ``step``."""
        return self.usable + self.freed[count] - step.eq

    def fits(self, count: int, step: _Held) -> bool:
        """Whether GPU-eq and quota suffice once ``count`` ends have happened, under ``step``
        (leaves the quota walk there)."""
        if self.room(count, step) < self.demand or self.pool_freed[count] < self.pool_need:
            return False
        quota = self.quota
        if quota is None:
            return True
        total, nominal = self.team.freed(count)
        quota.total = self.total0 - total + step.quota
        quota.held = self.held0 - nominal + step.nominal
        return quota.fits()

    def nodes_ready(self, step: _Held) -> int:
        """The fewest ends after which, under ``step``, enough nodes of the pool have room for
        one pod each that the job's pods could fit (as many nodes as it needs at the least: its
        pods over the most a node takes): no placement before."""
        shape = self.ask.shapes[self.gpu_class]
        pool, profile = self.pool, self.profile
        per_node = profile.most_on_a_node(pool) // shape.devices
        if per_node <= 0:
            return len(profile.times) + 1
        needed = -(-shape.pods // per_node)
        held: dict[int, int] = {}
        for shadow in step.on_pool:
            for local, devices in shadow.used:
                held[local] = held.get(local, 0) + devices
        counts = [
            profile.ready_count(pool, local, shape.devices + devices)
            for local, devices in held.items()
            if pool.eligible[local]
        ]
        others = 0  # the soonest ``needed`` of the nodes no reservation holds are enough
        for count, local in profile.ready_counts(pool, shape.devices):
            if others == needed:
                break
            if local not in held:
                counts.append(count)
                others += 1
        if len(counts) < needed:
            return len(profile.times) + 1
        return sorted(counts)[needed - 1]

    def first_count(self, lo: int, hi: int, step: _Held) -> int:
        """The fewest ends in ``lo..hi`` after which GPU-eq and quota suffice under ``step``
        (``hi + 1``: none); each only grows with the ends, so by bisection."""
        lo = bisect.bisect_left(self.freed, self.demand - self.usable + step.eq, lo, hi + 1)
        # no placement without as many devices free on the pool's eligible nodes, at most
        lo = bisect.bisect_left(self.pool_freed, self.pool_need, lo, hi + 1)
        if lo <= hi:  # only for a step with candidates left
            lo = min(max(lo, self.nodes_ready(step)), hi + 1)
        quota = self.quota
        if quota is not None:
            need = self.total0 + step.quota + self.demand - quota.cap
            lo = self.team.first_count(self.team.total, need, lo, hi)
            if quota.needs_nominal:
                need = self.held0 + step.nominal + self.demand - quota.nominal
                lo = self.team.first_count(self.team.nominal, need, lo, hi)
        return lo

    def free_at(self, count: int) -> list[int]:
        """The free devices per node of the pool once ``count`` ends have happened, without
        the reservations (a copy). The attempts of a search go forward in time: each moves on
        from the one before."""
        if self.free is None or count < self.count:
            when = self.profile.times[count - 1] if count else None
            self.free = (
                list(self.pool.free) if when is None else self.profile.free_at(self.pool, when)
            )
            self.count = count
        free, pool, ends = self.free, self.pool, self.profile.ends
        for index in range(self.count, count):
            for spot in ends[index][0].spots:
                if spot.pool is pool:
                    free[spot.local] += spot.devices
        self.count = count
        return list(free)

    def starts(self) -> tuple[list[_AtStart], list[datetime]]:
        if self.at_starts is None:
            found = []
            for step in self.steps:
                if not step.starts:
                    continue
                assert step.time is not None
                count = bisect.bisect_right(self.profile.times, step.time)
                total = held = 0
                if self.quota is not None:
                    total, held = self.team.freed(count)
                    total = self.total0 - total + step.quota
                    held = self.held0 - held + step.nominal
                free = {}
                for local in step.touched:
                    value = self.profile.node_free(self.pool, local, step.time)
                    for shadow in step.on_pool:
                        for node, devices in shadow.used:
                            if node == local:
                                value -= devices
                    free[local] = value
                found.append(_AtStart(step.time, self.room(count, step), total, held, free))
            self.at_starts = found
            self.start_times = [a.time for a in found]
        return self.at_starts, self.start_times

    def released_fit(
        self, count: int, when: datetime, step: _Held, window: list[_AtStart], shape: Shape
    ) -> bool:
        """Whether a node that jobs left since the last failed placement (of this step) now has
        room for a pod over the whole span. If none has, the placement fails again: within a
        step the room of the other nodes has not grown (a longer span only shrinks it), and
        whether pods fit only grows with the room of each node."""
        pool, profile = self.pool, self.profile
        released = {
            spot.local
            for alloc, _ in profile.ends[self.unplaced_count : count]
            for spot in alloc.spots
            if spot.pool is pool and pool.eligible[spot.local]
        }
        for local in released:
            room = profile.node_free(pool, local, when)
            for shadow in step.on_pool:
                for node, devices in shadow.used:
                    if node == local:
                        room -= devices
            for at in window:
                room = min(room, at.free.get(local, room))
            if room >= shape.devices:
                return True
        return False

    def attempt(self, when: datetime, step: _Held) -> bool:
        """Reserve the job from ``when`` if it fits there for its whole runtime."""
        self.run.walked += 1
        count = bisect.bisect_right(self.profile.times, when)
        if not self.fits(count, step):
            return False
        ask, pool, quota, demand = self.ask, self.pool, self.quota, self.demand
        end = when + ask.runtime
        at_starts, start_times = self.starts()
        window = at_starts[
            bisect.bisect_right(start_times, when) : bisect.bisect_left(start_times, end)
        ]
        if window:
            if demand > min(a.usable for a in window):
                return False
            if quota is not None:
                more = max(a.total for a in window) - quota.total
                more_nominal = max(a.held for a in window) - quota.held
                if not quota.fits(max(more, 0), max(more_nominal, 0)):
                    return False
        shape = ask.shapes[self.gpu_class]
        if self.unplaced is step and not self.released_fit(count, when, step, window, shape):
            self.unplaced_count = count
            return False
        free = self.free_at(count)
        for shadow in step.on_pool:
            for local, devices in shadow.used:
                free[local] -= devices
        fitting = free
        if window:
            fitting = list(free)
            for at in window:
                for local, value in at.free.items():
                    if value < fitting[local]:
                        fitting[local] = value
        placement = place(
            pool, shape, fitting, kept=self.run.kept_nodes(ask.job.id, self.gpu_class)
        )
        if placement is None:
            self.unplaced, self.unplaced_count = step, count
            return False
        used = [(local, pods * shape.devices) for local, pods in placement]
        extra = list(free)
        for local, devices in used:
            extra[local] -= devices
        quota_rooms = None
        if quota is not None:
            nominal_room = quota.nominal - quota.held - demand if quota.needs_nominal else None
            quota_rooms = (quota.needs_nominal, quota.cap - quota.total - demand, nominal_room)
        room = self.room(count, step)
        self.found = _Found(when, end, used, extra, room - demand, quota_rooms, placement)
        _put(self.run, ask, self.gpu_class, pool, demand, self.found)
        return True


@dataclass(frozen=True, slots=True)
class _Found:
    """What a reservation search found: the job's reservation from ``when`` to ``end`` on the
    nodes ``used``, what it leaves (``extra`` per node, ``eq_extra``) and, on quota, whether it
    needs nominal and the quota room it leaves (in all, within nominal); ``placement``: the pods
    per node (``Shadow.placement``)."""

    when: datetime
    end: datetime
    used: list[tuple[int, int]]
    extra: list[int]
    eq_extra: int
    quota_rooms: tuple[bool, int, int | None] | None
    placement: Placement


def _put(run: Pass, ask: Ask, gpu_class: str, pool: Pool, demand: int, found: _Found) -> None:
    """Make the reservation ``found`` for ``ask``: charge the reservations it overlaps with
    what it takes, then add it (and its quota reservation) behind them."""
    when, end, used = found.when, found.end, found.used
    shadows = run.shadows.setdefault(gpu_class, [])
    run.shaded += 1
    for shadow in shadows:
        if when <= shadow.time < end:
            shadow.eq_extra -= demand
            if shadow.pool is pool:
                for local, devices in used:
                    shadow.extra[local] -= devices
    shadows.append(
        Shadow(
            ask.job.id,
            when,
            end,
            pool,
            list(used),
            demand,
            list(found.extra),
            found.eq_extra,
            list(found.placement),
        )
    )
    if found.quota_rooms is None:
        return
    needs_nominal, total_room, nominal_room = found.quota_rooms
    quotas = run.quota_shadows.setdefault((ask.job.team, gpu_class), [])
    for reserved in quotas:
        if when <= reserved.time < end:
            reserved.total_room -= demand
            if needs_nominal and reserved.nominal_room is not None:
                reserved.nominal_room -= demand
    quotas.append(
        QuotaShadow(ask.job.id, when, end, demand, needs_nominal, total_room, nominal_room)
    )


def _reserve(run: Pass, ask: Ask, gpu_class: str, pool: Pool, option: Option) -> bool:
    """``_search``, once per job, class, option, content of the class (``State.class_changes``:
    what its jobs hold, its reservations, its nodes) and reservations made ahead of it on the
    class and the team's quota of it. The forecast runs the pass again in each scenario from
    the state the plan's pass left (``State.rollback``), and a class that the scenario's first
    moment left alone sees the same searches again. A search found again is made again as it
    was found and counts the attempts it cost (``Pass.walked``: the replays' budget), so the
    plan is the same as without the cache."""
    state = run.state
    shadows = run.shadows.setdefault(gpu_class, [])  # as the search leaves it, found or not
    quotas: list[QuotaShadow] = []
    if option[0] is not CapacityKind.RESERVED:
        quotas = run.quota_shadows.get((ask.job.team, gpu_class), [])
    kept = run.kept_nodes(ask.job.id, gpu_class)
    key = (
        ask.job.id,
        gpu_class,
        id(pool),
        option,
        None if kept is None else tuple(kept),  # the nodes it takes first (``Pass.kept``)
        state.class_changes[gpu_class],
        tuple((s.time, s.end, id(s.pool), tuple(s.used), s.eq) for s in shadows),
        tuple((q.time, q.end, q.demand, q.nominal) for q in quotas),
    )
    cached = state.reserve_memo.get(key)
    if cached is not None:
        found, walked = cached
        run.walked += walked
        if found is None:
            return False
        _put(run, ask, gpu_class, pool, ask.demand[gpu_class], found)
        return True
    walked = run.walked
    search = _search(run, ask, gpu_class, pool, option)
    found = search.found if search is not None else None
    state.reserve_memo[key] = (found, run.walked - walked)
    return found is not None


def _search(run: Pass, ask: Ask, gpu_class: str, pool: Pool, option: Option) -> _Search | None:
    """Reserve for ``ask`` the earliest time from which it fits ``gpu_class`` for its whole
    runtime (limit), given that running jobs end at their limits and the reservations already
    made keep theirs (and, unless the option is a reservation's, its team's quota would take
    it): the search, which made it (``_Search.found``); None if there is none with what runs now.

    The candidates are the times something ends (a job or a reservation); from one, the job
    must fit the least room until it would end (the room shrinks only where a reservation
    starts). Between two times a reservation starts or ends the room only grows, so a search
    in the class's ``_Profile`` finds the first end after which GPU-eq and quota suffice; only
    from there are candidates checked over their span and placed on nodes, one by one."""
    state = run.state
    kind, rid, lend = option
    shape = ask.shapes[gpu_class]
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    quota = None if kind is CapacityKind.RESERVED else _QuotaWalk.start(state, ask, gpu_class)
    shadows = run.shadows.setdefault(gpu_class, [])
    quotas = run.quota_shadows.get((ask.job.team, gpu_class), []) if quota else []
    profile = _profile(state, gpu_class)
    search = _Search(
        run,
        ask,
        gpu_class,
        pool,
        ask.demand[gpu_class],
        state.usable(gpu_class, kind, rid, lend, own),
        quota,
        profile,
        profile.freed(rid),
        profile.team_freed(ask.job.team),
        profile.pool_freed(pool),
        shape.pods * shape.devices - pool.free_devices,
        _held_over_time(shadows, quotas, pool),
    )
    if quota is not None:
        search.total0, search.held0 = quota.total, quota.held
    times = profile.times
    reserved_ends = {r.end for r in shadows} | {q.end for q in quotas}
    steps = search.steps
    for index, step in enumerate(steps):
        until = steps[index + 1].time if index + 1 < len(steps) else None
        first = 0 if step.time is None else bisect.bisect_left(times, step.time)
        last = len(times) if until is None else bisect.bisect_left(times, until)
        tried = None
        if step.time is not None and step.time in reserved_ends:
            tried = step.time
            if search.attempt(step.time, step):
                return search
        position = search.first_count(first + 1, last, step) - 1
        while position < last:
            when = times[position]
            position = bisect.bisect_right(times, when)
            if when != tried and search.attempt(when, step):
                return search
    return None


def fit_shadowed(
    run: Pass,
    ask: Ask,
    gpu_class: str,
    options: list[Option],
    reserved: bool = True,
    probe: bool = False,
) -> Fit | None:
    """``fit_class`` under the head-of-queue reservations ahead (unless not ``reserved``): a job
    that would still run when one starts may use only what that one leaves. A real job takes
    the nodes its reservation chose first (``Pass.kept``); a ``probe`` has none."""
    state = run.state
    kept = None if probe else run.kept_nodes(ask.job.id, gpu_class)
    if not reserved:
        return fit_class(state, ask, gpu_class, options, kept=kept)
    options = quota_guard(run, ask, gpu_class, options)
    if not options:
        return None
    end = state.now + ask.runtime
    shadows = [s for s in run.shadows.get(gpu_class, ()) if s.time < end]
    if not shadows:
        return fit_class(state, ask, gpu_class, options, kept=kept)
    # what the shadows leave is the same for every job they constrain alike: worked out once
    # per set of shadows and version of the class
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    key = (gpu_class, id(pool), state.class_version[gpu_class], *(s.job_id for s in shadows))
    left = run.views.get(key)
    if left is None:
        left = run.views[key] = left_by(state, pool, shadows, (run.floors, run.shaded))
    return fit_class(state, ask, gpu_class, options, *left, kept=kept)


def fit_under(
    state: State, ask: Ask, gpu_class: str, options: list[Option], shadows: list[Shadow]
) -> Fit | None:
    if not shadows:
        return fit_class(state, ask, gpu_class, options)
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    return fit_class(state, ask, gpu_class, options, *left_by(state, pool, shadows))


Floors = dict[tuple[Any, ...], list[int]]


def left_by(
    state: State,
    pool: Pool | None,
    shadows: list[Shadow],
    floors: tuple[Floors, int] | None = None,
) -> tuple[list[int] | None, int]:
    """The free devices per node of ``pool`` (None: the pool's own) and the class's GPU-eq that
    a job running past every one of ``shadows`` may use. ``floors``: where to keep, per set of
    shadows, the least they leave per node, and the count of changes to what shadows leave
    (``Pass.shaded``: a shadow added, or a job admitted that still runs when one starts), so
    that a pass asking again after jobs that end before the shadows took devices, or others
    freed some, compares the free devices with one list, not with each shadow's (32 shadows
    over 130 nodes, thousands of times, at 10,000 waiting)."""
    mine = [shadow for shadow in shadows if shadow.pool is pool]
    eq = min(s.eq_extra for s in shadows)
    if pool is None or not mine:
        return None, eq
    floor: list[int] | None = None
    if floors is not None:
        kept, shaded = floors
        key = (id(pool), shaded, *(shadow.job_id for shadow in mine))
        floor = kept.get(key)
    if floor is None:
        floor = mine[0].extra
        for shadow in mine[1:]:
            floor = [a if a < b else b for a, b in zip(floor, shadow.extra, strict=True)]
        if floors is not None:
            floor = kept[key] = list(floor)
    return [a if a < b else b for a, b in zip(pool.free, floor, strict=True)], eq


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
