"""Whether a job fits a GPU class now, and turning a fit into a hold on the working state.

Shared by the admission pass and the forward simulation so that both apply the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from queues.admission.asks import Ask
from queues.admission.snapshot import CapacityKind, PreemptionClass
from queues.admission.state import Alloc, Placement, Pool, State, place, spots_for

Option = tuple[CapacityKind, int | None, bool]


@dataclass(slots=True)
class Fit:
    """Where and under which entitlement a job fits."""

    gpu_class: str
    kind: CapacityKind
    reservation_id: int | None
    pool: Pool
    placement: Placement
    constrained: bool = False


def fit_class(
    state: State,
    ask: Ask,
    gpu_class: str,
    options: list[Option],
    view: Sequence[int] | None = None,
    eq_cap: int | None = None,
    kept: Placement | None = None,
) -> Fit | None:
    """The first entitlement in ``options`` under which ``ask`` fits ``gpu_class`` now.

    ``view`` restricts the free devices per node of the job's pool and ``eq_cap`` its GPU-eq
    (backfill passes what the shadows ahead leave over); ``kept`` are the nodes its
    head-of-queue reservation chose, taken where they still fit (see ``place``)."""
    pool = state.pools.get((gpu_class, ask.mode, ask.profile))
    if pool is None or not options:
        return None
    shape = ask.shapes[gpu_class]
    demand = ask.demand[gpu_class]
    if pool.free_devices < shape.pods * shape.devices:
        return None
    if eq_cap is not None and demand > eq_cap:
        return None
    own = state.holder_reservations(ask.job.team, ask.queue.name, gpu_class)
    for kind, rid, lend in options:
        if demand > state.usable(gpu_class, kind, rid, lend, own):
            continue
        placement = place(pool, shape, view, kept=kept)
        if placement is not None:
            return Fit(gpu_class, kind, rid, pool, placement, constrained=eq_cap is not None)
    return None


def hold(state: State, ask: Ask, fit: Fit, start: datetime) -> Alloc:
    """Put ``ask`` on the state as ``fit`` says, from ``start`` to its runtime limit."""
    spots = spots_for(fit.pool, fit.placement, ask.shapes[fit.gpu_class])
    alloc = Alloc(
        job_id=ask.job.id,
        team=ask.job.team,
        queue=ask.queue.name,
        user=ask.job.user,
        gpu_class=fit.gpu_class,
        kind=fit.kind,
        reservation_id=fit.reservation_id,
        spots=spots,
        eq=sum(spot.eq for spot in spots),
        end=start + ask.runtime,
        rank=ask.rank,
        preemptible=ask.queue.preemption is not PreemptionClass.NEVER,
        grace=ask.queue.grace_period,
        lost_work=timedelta(0),
    )
    state.take(alloc)
    if state.landing is not None:
        state.note_landing(alloc, start)
    return alloc
