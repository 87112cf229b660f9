"""The per-class simulation that leaves a parked job parked while what parked it still holds it
back (``estimate.simulate``) estimates exactly what the one that let it return and parked it
again did (``simulate_reference.simulate``), probes included."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import Phase, given, settings

from queues.admission import Snapshot, forecast, plan
from queues.admission.testing import NOW, node, pending, queue, running, team
from queues.admission.testing import snapshot as cluster
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


def test_a_job_parked_by_its_user_cap_comes_back_on_every_class() -> None:
    """Ann may run one job in ``capped``. Her waiting job is parked on both its classes while
    her running job holds her cap; when it ends, the job starts at once on the H100s, which have
    room, though the A100s (the class its park list names first) are full for ten hours. It came
    back on the A100s only, and waited the ten hours (found by ``make test-slow``)."""
    hours = timedelta(hours=1)
    h100, a100 = "h100-80gb", "a100-40gb"
    queues = (
        queue("capped", priority=10, max_running_jobs_per_user=1, default_runtime=2 * hours),
        queue("urgent", priority=40, default_runtime=10 * hours, gpu_classes=(a100,)),
    )
    quotas = {h100: 8, a100: 8}
    start = cluster(
        queues=queues,
        nodes=[node("h1", h100), node("a1", a100)],
        teams=[team("t", quotas), team("u", quotas)],
        running=[
            # ann's job in ``capped``, ending in an hour
            running(1, "t", "h1", queue="capped", started=hours, runtime=2 * hours),
            # two jobs of another team ending in half an hour, on each class
            running(
                2,
                "u",
                "a1",
                8,
                queue="urgent",
                user="bob",
                gpu_class=a100,
                started=timedelta(minutes=30),
                runtime=hours,
            ),
            running(
                3,
                "u",
                "h1",
                queue="capped",
                user="bob",
                started=timedelta(minutes=30),
                runtime=hours,
            ),
        ],
        pending=[
            pending(10, "u", "urgent", gpus=8, user="bob"),  # takes the A100s for 10 hours
            pending(11, "t", "capped", user="ann"),
        ],
    )
    for budget in (0, None):  # the simulation, and the engine's own passes replayed
        result = plan(start, replay_budget=budget)
        estimate = result.status(11).estimated_start
        assert (estimate.at, estimate.gpu_class) == (NOW + hours, h100), budget
        assert result.status(10).estimated_start.at == NOW + timedelta(minutes=30)
