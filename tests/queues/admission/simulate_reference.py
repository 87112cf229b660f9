"""The per-class simulation as it was before its park lists were checked in place
(``estimate.simulate``): the oracle test_simulate_parks.py compares it with."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from queues.admission.asks import Ask
from queues.admission.diagnose import entitlement
from queues.admission.fit import fit_class, hold
from queues.admission.never import never_fits
from queues.admission.plan import EstimatedStart
from queues.admission.snapshot import JobId
from queues.admission.state import Alloc, State

END, RESERVATION_ON, RESERVATION_OFF, NODE_BACK, HELD_BACK_ENDS = 0, 1, 2, 3, 4

ParkKey = tuple[str, str, str]


NEVER_FOUND = (
    "no start found: it waits behind jobs that never start, or on capacity that running jobs do "
    "not free"
)


def simulate(
    state: State,
    asks: Sequence[Ask],
    probes: Sequence[Ask] = (),
    finish: Callable[[Alloc], datetime] | None = None,
    runtime_of: Callable[[Ask], timedelta] | None = None,
) -> tuple[dict[JobId, EstimatedStart], dict[JobId, EstimatedStart], None]:
    """Each ask's estimated start, and each probe's (``probes`` sorted by order, then id; see the
    module docstring); no horizon, so no tail projected (the third, as ``estimate.simulate``'s). Consumes ``state`` (it runs the clock forward on it). The real jobs'
    estimates are the same with or without probes. ``finish`` says when a job holding GPUs
    ends and ``runtime_of`` how long a job started in the simulation runs (default: their
    runtime limits)."""
    simulation = _Simulation(state)
    if finish is not None:
        simulation.finish = finish
    if runtime_of is not None:
        simulation.runtime_of = runtime_of
    simulation.enqueue(asks)
    simulation.enqueue_ghosts(probes)
    simulation.seed_events()
    simulation.run()
    return simulation.results, simulation.probe_results, None


Entry = tuple[int, int]  # (plan order, index) in a class's heap
Parked = tuple[int, int, str]  # (plan order, index, GPU class) on a park list


class _Simulation:
    """The event loop of ``simulate`` and its bookkeeping: real jobs in one heap per GPU class,
    parked jobs per team or user, ghosts (probes) in heaps of their own, and the events."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.results: dict[JobId, EstimatedStart] = {}
        self.probe_results: dict[JobId, EstimatedStart] = {}
        # Real jobs: every ask that may start, its heap entries per class, and its park lists.
        self.live: list[Ask] = []
        self.held: list[int] = []
        self.heaps: dict[str, list[Entry]] = {name: [] for name in state.classes}
        self.done: list[bool] = []
        self.parked: dict[ParkKey, list[Parked]] = {}
        self.freed: list[ParkKey] = []  # park lists to look at once this moment's events are in
        self.remaining = 0
        # Ghosts: (order, ghost index) per class; the index follows ``probes``' order, so ties
        # in order go by probe id. ``ghost_seen`` keeps the class version at which a ghost last
        # failed to fit: until the class changes, checking it again gives the same answer.
        self.ghosts: list[Ask] = []
        self.ghost_heaps: dict[str, list[Entry]] = {name: [] for name in state.classes}
        self.ghost_done: list[bool] = []
        self.ghost_parked: dict[ParkKey, list[Parked]] = {}
        self.ghost_seen: dict[tuple[int, str], int] = {}
        self.ghost_dirty: set[str] = set()
        self.ghosts_left = 0
        self.events: list[tuple[datetime, int, int, object]] = []
        self.sequence = 0
        self.cost_order = {name: i for i, name in enumerate(_cost_order(state))}
        self.finish: Callable[[Alloc], datetime] = lambda alloc: alloc.end
        self.runtime_of: Callable[[Ask], timedelta] = lambda ask: ask.runtime

    # --- setting up ------------------------------------------------------------------------------

    def never_why(self, ask: Ask) -> str:
        """Why ``ask`` can never start ("" if it may)."""
        reason = never_fits(self.state, ask)
        return reason.message if reason else ""

    def enqueue(self, asks: Sequence[Ask]) -> None:
        """Put every real job that may start into the heaps of its classes (a job held back
        after roll-backs joins them when its back-off ends)."""
        for ask in asks:
            why = self.never_why(ask)
            if why:
                self.results[ask.job.id] = EstimatedStart(at=None, why_unknown=why)
                continue
            index = len(self.live)
            self.live.append(ask)
            if ask.held_until is not None:
                self.held.append(index)
                continue
            for gpu_class in ask.classes:
                self.heaps[gpu_class].append((ask.order, index))
        for heap in self.heaps.values():
            heapq.heapify(heap)
        self.done = [False] * len(self.live)
        self.remaining = len(self.live)

    def enqueue_ghosts(self, probes: Sequence[Ask]) -> None:
        for ask in probes:
            why = self.never_why(ask)
            if why:
                self.probe_results[ask.job.id] = EstimatedStart(at=None, why_unknown=why)
                continue
            for gpu_class in ask.classes:
                self.ghost_heaps[gpu_class].append((ask.order, len(self.ghosts)))
            self.ghosts.append(ask)
        for heap in self.ghost_heaps.values():
            heapq.heapify(heap)
        self.ghost_done = [False] * len(self.ghosts)
        self.ghosts_left = len(self.ghosts)

    def push(self, when: datetime, kind: int, payload: object) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (when, kind, self.sequence, payload))

    def seed_events(self) -> None:
        """What will happen if nothing new arrives: running jobs end at their limits,
        reservations open and close, nodes come back from maintenance, back-offs end."""
        state = self.state
        for alloc in sorted(state.allocs.values(), key=lambda a: (a.end, a.job_id)):
            self.push(self.finish(alloc), END, alloc)
        for rid, reservation in sorted(state.reservations.items()):
            if reservation.start is not None and reservation.start > state.now:
                self.push(reservation.start, RESERVATION_ON, rid)
            if reservation.end is not None and reservation.end > state.now:
                self.push(reservation.end, RESERVATION_OFF, rid)
        for index, node in enumerate(state.nodes):
            if (
                not state.node_eligible[index]
                and node.healthy
                and node.maintenance_until is not None
            ):
                self.push(max(state.now, node.maintenance_until), NODE_BACK, index)
        for index in self.held:
            until = self.live[index].held_until
            assert until is not None
            self.push(until, HELD_BACK_ENDS, index)

    # --- park lists --------------------------------------------------------------------------

    def park(self, key: ParkKey, entry: Parked) -> None:
        heapq.heappush(self.parked.setdefault(key, []), entry)

    def unpark(self, key: ParkKey, dirty: set[str]) -> None:
        """The first real job parked under ``key`` returns to its class's heap; every ghost
        parked there returns (ghosts hold nothing, so letting all of them look again costs a
        check each and takes nothing from anyone)."""
        for order, ghost, gpu_class in self.ghost_parked.pop(key, ()):
            if not self.ghost_done[ghost]:
                heapq.heappush(self.ghost_heaps[gpu_class], (order, ghost))
                self.ghost_dirty.add(gpu_class)
        waiting = self.parked.get(key)
        while waiting:
            order, index, gpu_class = heapq.heappop(waiting)
            if self.done[index]:
                continue
            heapq.heappush(self.heaps[gpu_class], (order, index))
            dirty.add(gpu_class)
            while waiting and waiting[0][1] == index:  # its other classes parked there
                gpu_class = heapq.heappop(waiting)[2]
                heapq.heappush(self.heaps[gpu_class], (order, index))
                dirty.add(gpu_class)
            return

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        while self.events and (self.remaining or self.ghosts_left):
            now = self.events[0][0]
            dirty: set[str] = set()
            while self.events and self.events[0][0] == now:
                _, kind, _, payload = heapq.heappop(self.events)
                self.apply_event(kind, payload, dirty)
            # parked jobs look again once everything that happens now has happened
            for key in self.freed:
                self.unpark(key, dirty)
            self.freed.clear()
            while dirty:
                gpu_class = min(dirty, key=self.cost_rank)
                dirty.discard(gpu_class)
                if gpu_class in self.heaps:
                    self.scan(gpu_class, now, dirty)
            if self.ghost_dirty:  # ghosts back from a park list, maybe on an untouched class
                for gpu_class in sorted(self.ghost_dirty, key=self.cost_rank):
                    if gpu_class in self.heaps:
                        self.check_ghosts(gpu_class, self.head_order(gpu_class), now)
                self.ghost_dirty.clear()
        for index, ask in enumerate(self.live):
            if not self.done[index]:
                self.results[ask.job.id] = EstimatedStart(at=None, why_unknown=NEVER_FOUND)
        for ghost, ask in enumerate(self.ghosts):
            if not self.ghost_done[ghost]:
                self.probe_results[ask.job.id] = EstimatedStart(at=None, why_unknown=NEVER_FOUND)

    def cost_rank(self, gpu_class: str) -> int:
        return self.cost_order.get(gpu_class, len(self.cost_order))

    def apply_event(self, kind: int, payload: object, dirty: set[str]) -> None:
        """One event's effect on the state; the classes it touched go into ``dirty``."""
        state = self.state
        if kind == END:
            assert isinstance(payload, Alloc)
            if not payload.live:
                return
            state.give_back(payload)
            dirty.add(payload.gpu_class)
            self.freed += [
                ("t", payload.team, payload.gpu_class),
                ("u", payload.queue, payload.user),
            ]
        elif kind in (RESERVATION_ON, RESERVATION_OFF):
            assert isinstance(payload, int)
            reservation = state.reservations[payload]
            state.set_reservation_active(payload, kind == RESERVATION_ON)
            dirty.add(reservation.gpu_class)
            if kind == RESERVATION_ON:
                self.freed.append(("t", reservation.team, reservation.gpu_class))
        elif kind == NODE_BACK:
            assert isinstance(payload, int)
            state.set_node_eligible(payload, True)
            dirty.add(state.nodes[payload].gpu_class)
        else:  # a job held back after roll-backs joins the queue in its place
            assert isinstance(payload, int)
            ask = self.live[payload]
            for gpu_class in ask.classes:
                heapq.heappush(self.heaps[gpu_class], (ask.order, payload))
                dirty.add(gpu_class)

    def scan(self, gpu_class: str, now: datetime, dirty: set[str]) -> None:
        """Start the class's waiting jobs in plan order from the head, parking those held back
        by their team's quota or their user limit, until one does not fit: the class is then
        full for everyone behind it. Ghosts are checked at their places on the way."""
        state = self.state
        heap = self.heaps[gpu_class]
        ghost_heap = self.ghost_heaps[gpu_class]
        while heap:
            order, index = heap[0]
            if self.done[index]:
                heapq.heappop(heap)
                continue
            if ghost_heap and ghost_heap[0][0] <= order:
                self.check_ghosts(gpu_class, order, now)  # before any real job behind them
            ask = self.live[index]
            if _user_blocked(state, ask):
                heapq.heappop(heap)
                self.park(("u", ask.queue.name, ask.job.user), (order, index, gpu_class))
                continue
            options = entitlement(state, ask, gpu_class)
            if not options:
                heapq.heappop(heap)
                self.park(("t", ask.job.team, gpu_class), (order, index, gpu_class))
                continue
            fit = fit_class(state, ask, gpu_class, options)
            if fit is None:
                break
            heapq.heappop(heap)
            alloc = hold(state, ask, fit, now)
            self.push(now + self.runtime_of(ask), END, alloc)
            self.done[index] = True
            self.remaining -= 1
            self.results[ask.job.id] = EstimatedStart(at=now, gpu_class=gpu_class)
            # the team or user may have room for the next of its parked jobs too
            self.unpark(("t", ask.job.team, gpu_class), dirty)
            self.unpark(("u", ask.queue.name, ask.job.user), dirty)
        if ghost_heap:
            self.check_ghosts(gpu_class, self.head_order(gpu_class), now)

    def head_order(self, gpu_class: str) -> float:
        """The order of the first real job still waiting in the class's heap (inf: none)."""
        heap = self.heaps[gpu_class]
        while heap and self.done[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def check_ghosts(self, gpu_class: str, limit: float, now: datetime) -> None:
        """Check every ghost of the class with order <= ``limit`` (no real job ahead of it is
        still waiting on the class). Reads the state only."""
        state = self.state
        heap = self.ghost_heaps[gpu_class]
        blocked: list[Entry] = []
        version = state.class_version[gpu_class]
        while heap and heap[0][0] <= limit:
            entry = heapq.heappop(heap)
            order, ghost = entry
            if self.ghost_done[ghost]:
                continue
            if self.ghost_seen.get((ghost, gpu_class)) == version:
                blocked.append(entry)
                continue
            ask = self.ghosts[ghost]
            if _user_blocked(state, ask):
                key: ParkKey = ("u", ask.queue.name, ask.job.user)
                self.ghost_parked.setdefault(key, []).append((order, ghost, gpu_class))
                continue
            options = entitlement(state, ask, gpu_class)
            if not options:
                key = ("t", ask.job.team, gpu_class)
                self.ghost_parked.setdefault(key, []).append((order, ghost, gpu_class))
                continue
            if fit_class(state, ask, gpu_class, options) is None:
                self.ghost_seen[(ghost, gpu_class)] = version
                blocked.append(entry)
                continue
            self.ghost_done[ghost] = True
            self.ghosts_left -= 1
            self.probe_results[ask.job.id] = EstimatedStart(at=now)
        for entry in blocked:
            heapq.heappush(heap, entry)


def _cost_order(state: State) -> list[str]:
    return [g.name for g in sorted(state.classes.values(), key=lambda g: (g.weight, g.name))]


def _user_blocked(state: State, ask: Ask) -> bool:
    queue = ask.queue
    key = (queue.name, ask.job.user)
    jobs_cap = queue.max_running_jobs_per_user
    if jobs_cap is not None and state.user_jobs.get(key, 0) >= jobs_cap:
        return True
    eq_cap = queue.max_gpu_eq_per_user
    return eq_cap is not None and state.user_eq.get(key, 0) + ask.min_demand > state.eq_units(
        eq_cap
    )
