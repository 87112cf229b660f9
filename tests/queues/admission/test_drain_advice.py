"""Free GPUs no waiting shape can use, and which node's drain makes room (queues.admission.drain):
the engine's own placement decides."""

from __future__ import annotations

from datetime import timedelta

from queues.admission.drain import drains_to_fit
from queues.admission.testing import NOW, node, pending, running, snapshot, team

TEAMS = [team("nlp", {"h100-80gb": 32}), team("vision", {"h100-80gb": 32})]


def three_nodes_each_with_six_taken_by_two_jobs():
    # h100-01..03: 8 GPUs each, 2 held on each; 18 free but no 8-GPU slot. The jobs on h100-02
    # end first: started 1 h ago with a 1 h 20 min limit → free in 20 min.
    return [
        running(1, "nlp", "h100-01", 2, started=timedelta(hours=1), runtime=timedelta(hours=3)),
        running(2, "nlp", "h100-02", 2, started=timedelta(hours=1), runtime=timedelta(minutes=80)),
        running(3, "nlp", "h100-03", 2, started=timedelta(hours=1), runtime=timedelta(hours=2)),
    ]


def test_an_eight_gpu_job_that_fits_nowhere_gets_the_node_that_drains_soonest():
    snap = snapshot(
        nodes=[node("h100-01"), node("h100-02"), node("h100-03")],
        teams=TEAMS,
        running=three_nodes_each_with_six_taken_by_two_jobs(),
        pending=[pending(10, "vision", capability="any-gpu", gpus=8)],
    )

    [advice] = drains_to_fit(snap)

    assert (advice.gpu_class, advice.free, advice.pods, advice.devices, advice.jobs) == (
        "h100-80gb",
        18,
        1,
        8,
        1,
    )
    assert (advice.node, advice.ends_at, advice.minutes) == (
        "h100-02",
        NOW + timedelta(minutes=20),
        20,
    )


def test_no_advice_when_the_shape_fits_or_too_little_is_free():
    fits = snapshot(
        nodes=[node("h100-01"), node("h100-02"), node("h100-03"), node("h100-04")],
        teams=TEAMS,
        running=three_nodes_each_with_six_taken_by_two_jobs(),
        pending=[pending(10, "vision", gpus=8)],
    )
    too_little = snapshot(
        nodes=[node("h100-01")],
        teams=TEAMS,
        running=[running(1, "nlp", "h100-01", 2)],
        pending=[pending(10, "vision", gpus=8)],
    )
    small = snapshot(
        nodes=[node("h100-01"), node("h100-02"), node("h100-03")],
        teams=TEAMS,
        running=three_nodes_each_with_six_taken_by_two_jobs(),
        pending=[pending(10, "vision", gpus=4)],
    )

    assert drains_to_fit(fits) == []
    assert drains_to_fit(too_little) == []
    assert drains_to_fit(small) == []
