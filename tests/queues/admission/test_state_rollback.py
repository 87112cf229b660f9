"""A state rolled back to a checkpoint (``State.rollback``, how the forecast puts the state
back between its scenarios) holds exactly what it held then, so the next scenario starts from
the same state as the first: on hypothesis' snapshots, after the plan's pass, with a
simulation that ends and starts jobs, opens and closes reservations and brings nodes back."""

from __future__ import annotations

from hypothesis import event, given

from queues.admission import Snapshot
from queues.admission.asks import build_asks, build_probe_asks
from queues.admission.estimate import simulate
from queues.admission.pass_state import Pass
from queues.admission.scheduler import consider
from queues.admission.state import State
from tests.queues.admission.strategies import PROPERTIES, snapshots, snapshots_with_probes


def _held(state: State) -> tuple:
    """Everything a change of what jobs hold, of reservations or of nodes touches."""
    pools = tuple(
        (
            key,
            tuple(pool.free),
            tuple(pool.hbm_free),
            tuple(tuple(sorted(bucket)) for bucket in pool.by_free),
            tuple(pool.eligible),
            (pool.free_devices, pool.free_eq, pool.capacity_eq, pool.outside_eq),
        )
        for key, pool in sorted(state.pools.items(), key=lambda item: repr(item[0]))
    )
    tables = tuple(
        tuple(sorted(table.items(), key=repr))
        for table in (
            state.class_free,
            state.class_capacity,
            state.class_changes,
            state.nominal_jobs_eq,
            state.borrowed_jobs_eq,
            state.user_jobs,
            state.user_eq,
            state.res_active,
            state.res_used,
            state.res_idle,
            state.res_idle_total,
        )
    )
    held = (
        tuple(sorted(state.allocs)),
        tuple(sorted((name, tuple(sorted(jobs))) for name, jobs in state.class_allocs.items())),
        tuple(sorted((key, tuple(sorted(jobs))) for key, jobs in state.user_allocs.items())),
        all(alloc.live for alloc in state.allocs.values()),
    )
    return pools, tuple(state.node_eligible), tables, held, state.now


@given(snapshots(most_nodes=6, most_pending=16) | snapshots_with_probes())
@PROPERTIES
def test_a_rolled_back_state_holds_what_it_held_and_simulates_the_same(
    snapshot: Snapshot,
) -> None:
    state = State(snapshot)
    asks = build_asks(state)
    run = Pass(state=state, dry_run=False)
    for ask in asks:
        consider(run, ask)
    waiting = [o.ask for o in run.outcomes if o.start is None and not o.ask.static]
    probes = [p for p in build_probe_asks(state, asks) if not p.static]
    saved = state.checkpoint()
    before = _held(state)
    versions = dict(state.class_version)
    first = simulate(state, waiting, probes)
    if _held(state) != before:
        event("the simulation changed the state")
    state.rollback(saved)
    assert _held(state) == before
    # what was worked out for a class version in between is never taken for the state now
    assert all(state.class_version[name] > versions[name] for name in versions)
    assert simulate(state, waiting, probes) == first
