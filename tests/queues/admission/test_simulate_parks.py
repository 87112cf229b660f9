"""The per-class simulation that leaves a parked job parked while what parked it still holds it
back (``estimate.simulate``) estimates exactly what the one that let it return and parked it
again did (``simulate_reference.simulate``), probes included."""

from __future__ import annotations

from hypothesis import Phase, given, settings

from queues.admission import Snapshot, forecast, plan
from tests.queues.admission import simulate_reference
from tests.queues.admission.strategies import PROPERTIES, snapshots, snapshots_with_probes


def _estimates(snapshot: Snapshot) -> tuple:
    # a budget of 0: every estimate comes from the simulation
    result = plan(snapshot, replay_budget=0)
    return tuple((s.job_id, s.estimated_start) for s in result.pending), result.probe_estimates


def _both(snapshot: Snapshot) -> None:
    new = _estimates(snapshot)
    kept = forecast.simulate
    forecast.simulate = simulate_reference.simulate
    try:
        old = _estimates(snapshot)
    finally:
        forecast.simulate = kept
    assert new == old


@settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
@given(snapshots(most_pending=16))
def test_the_simulation_estimates_what_it_did(snapshot: Snapshot) -> None:
    _both(snapshot)


@settings(PROPERTIES, derandomize=True, database=None, phases=(Phase.generate,))
@given(snapshots_with_probes())
def test_the_simulation_estimates_what_it_did_for_probes(snapshot: Snapshot) -> None:
    _both(snapshot)
