"""The forecast follows the policy admission follows: with runtimes as predicted and nothing new
arriving, every job starts exactly when its estimate says; a job at the head of the queue is
protected whatever blocks it, its team's quota as well as capacity."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from queues.admission import Forecast, PendingJob, Plan, Snapshot, plan
from queues.admission.testing import (
    NOW,
    node,
    pending,
    play,
    queue,
    running,
    snapshot,
    team,
)

H100 = "h100-80gb"
QUEUES = (queue("training", default_runtime=timedelta(minutes=30)),)


SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8))  # (pods, GPUs per pod)


def mixed(
    seed: int, shapes: tuple[tuple[int, int], ...] = SHAPES, one_node: bool = False
) -> Snapshot:
    """A small oversubscribed cluster: 4 × 8 H100, running jobs ending at different times, and
    a burst of 1-16-GPU jobs (gangs of 2 × 8 too) of two teams, one of them short of quota."""
    rng = random.Random(seed)
    nodes = [node("n0", gpus=32)] if one_node else [node(f"n{i}") for i in range(4)]
    busy = [
        running(
            100 + i,
            "vision" if i % 2 else "nlp",
            "n0" if one_node else f"n{i}",
            gpus=rng.choice([4, 8]),
            started=timedelta(minutes=rng.randint(1, 9)),
            runtime=timedelta(minutes=rng.choice([10, 20, 30])),
        )
        for i in range(4)
    ]
    jobs = []
    for i in range(14):
        pods, gpus = rng.choice(shapes)
        jobs.append(
            pending(
                i + 1,
                rng.choice(["vision", "nlp"]),
                gpus=gpus,
                pods=pods,
                user=rng.choice(["ann", "bob"]),
                waited=timedelta(seconds=100 - i),
                runtime_limit=timedelta(minutes=rng.choice([5, 10, 15, 30])),
            )
        )
    return snapshot(
        nodes=nodes,
        queues=QUEUES,
        teams=[team("vision", {H100: 32}), team("nlp", {H100: 16})],
        running=busy,
        pending=jobs,
    )


def test_with_runtimes_at_their_limits_every_job_starts_when_its_bound_says() -> None:
    # No runtime history: every replay runs jobs to their limits, and ``at`` is that start.
    for seed in range(6):
        start = mixed(seed)
        estimates = {s.job_id: s.estimated_start for s in plan(start).pending}
        started = play(start)
        for job_id, estimate in estimates.items():
            assert estimate.at == started[job_id], (seed, job_id)


def test_with_runtimes_as_predicted_every_job_starts_when_likely_says() -> None:
    for seed in range(6):
        rng = random.Random(seed)
        start = mixed(seed)
        ratios = {job.id: rng.choice([0.3, 0.5, 0.8]) for job in (*start.running, *start.pending)}

        def told(job: PendingJob, ratios: dict[int, float] = ratios) -> PendingJob:
            ratio = ratios[job.id]
            return replace(job, forecast=Forecast(ratio, ratio / 2, min(1.0, ratio * 1.5)))

        for job in start.running:
            assert job.started_at is not None
            if job.started_at + job.runtime_limit * ratios[job.id] <= NOW:
                ratios[job.id] = 1.0  # it already ran longer than that: no such prediction
        start = replace(
            start,
            running=tuple(
                replace(j, forecast=Forecast(ratios[j.id], ratios[j.id], ratios[j.id]))
                for j in start.running
            ),
            pending=tuple(told(j) for j in start.pending),
        )
        runs = {j.id: j.runtime_limit * ratios[j.id] for j in start.running}
        runs.update({j.id: (j.runtime_limit or timedelta(0)) * ratios[j.id] for j in start.pending})
        result = plan(start)
        started = play(start, runs)
        for status in result.pending:
            estimate = status.estimated_start
            assert estimate.likely == started[status.job_id], (seed, status.job_id)
            assert estimate.range_low is not None and estimate.range_high is not None
            assert estimate.range_low <= estimate.likely <= estimate.range_high
            assert estimate.at is not None and estimate.range_high <= estimate.at


def test_a_gang_blocked_by_its_teams_quota_is_not_passed_by_later_jobs_that_would_delay_it() -> (
    None
):
    # nlp may hold 16 H100; its two 8-GPU jobs end in 10 and 20 minutes. Its 2 × 8 gang waits on
    # the quota; the 1-GPU jobs submitted after it run 30 minutes, so each would still hold
    # quota when the second job ends and the gang would wait behind them.
    start = snapshot(
        nodes=[node(f"n{i}") for i in range(4)],
        queues=QUEUES,
        teams=[team("nlp", {H100: 16})],
        running=[
            running(
                1, "nlp", "n0", gpus=8, started=timedelta(minutes=20), runtime=timedelta(minutes=30)
            ),
            running(
                2, "nlp", "n1", gpus=8, started=timedelta(minutes=10), runtime=timedelta(minutes=30)
            ),
        ],
        pending=[
            pending(
                10,
                "nlp",
                gpus=8,
                pods=2,
                waited=timedelta(minutes=5),
                runtime_limit=timedelta(minutes=30),
            ),
            *(
                pending(
                    20 + i,
                    "nlp",
                    gpus=1,
                    waited=timedelta(minutes=4),
                    runtime_limit=timedelta(minutes=30),
                )
                for i in range(4)
            ),
            pending(
                30, "nlp", gpus=1, waited=timedelta(minutes=4), runtime_limit=timedelta(minutes=5)
            ),
        ],
    )
    result = plan(start)
    gang = result.status(10)
    assert gang is not None and gang.binding.code.value == "QuotaExceeded"
    assert gang.estimated_start.at == NOW + timedelta(minutes=20)
    started = play(start)
    assert {s.job_id: s.estimated_start.at for s in result.pending} == started
    # The gang starts when both 8-GPU jobs have ended, before any 30-minute job of its team;
    # the 5-minute job fits in the quota job 1 frees and ends before the gang's time.
    assert started[10] == NOW + timedelta(minutes=20)
    assert started[30] == NOW + timedelta(minutes=10)
    assert min(started[20 + i] for i in range(4)) == NOW + timedelta(minutes=50)


def test_on_a_fixed_replay_the_interval_holds_at_least_80_percent_of_the_real_starts() -> None:
    # 36 jobs of four (user, image) groups, each with its own typical share of the limit; the
    # forecasts are what history of that group says (mean, 10th and 90th percentile of a
    # uniform spread of ± 0.15), the real run times are drawn from the same spread.
    rng = random.Random(11)
    centre = {"ann": 0.45, "bob": 0.6, "cy": 0.75, "di": 0.85}
    spread = 0.15
    jobs = []
    runs = {}
    for i in range(36):
        user = rng.choice(sorted(centre))
        pods, gpus = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)])
        limit = timedelta(minutes=rng.randint(3, 10))
        c = centre[user]
        forecast = Forecast(c, c - 0.8 * spread, min(1.0, c + 0.8 * spread))
        jobs.append(
            pending(
                i + 1,
                "vision",
                gpus=gpus,
                pods=pods,
                user=user,
                waited=timedelta(seconds=100 - i),
                runtime_limit=limit,
                forecast=forecast,
            )
        )
        runs[i + 1] = limit * min(1.0, max(0.3, c + rng.uniform(-spread, spread)))
    start = snapshot(
        nodes=[node(f"n{i}") for i in range(4)],
        queues=QUEUES,
        teams=[team("vision", {H100: 32})],
        pending=jobs,
    )
    result = plan(start)
    started = play(start, runs)
    waiting = [s for s in result.pending]
    inside = [
        s.estimated_start.range_low <= started[s.job_id] <= s.estimated_start.range_high
        for s in waiting
        if s.estimated_start.range_low and s.estimated_start.range_high
    ]
    assert len(inside) == len(waiting) >= 25
    assert sum(inside) / len(inside) >= 0.8, (sum(inside), len(inside))
    # and never later than the bound
    assert all(started[s.job_id] <= s.estimated_start.at for s in waiting)  # type: ignore[operator]


def test_a_job_kept_back_by_its_teams_quota_shadow_is_told_whose_start_it_would_delay() -> None:
    # nlp holds 8 of its 16 (job 1, ending in 20 min); its 2 × 8 gang needs all 16, so it waits
    # on the quota; a 30-minute 4-GPU job behind it would still hold quota at the gang's time.
    result = plan(
        snapshot(
            nodes=[node(f"n{i}") for i in range(4)],
            queues=QUEUES,
            teams=[team("nlp", {H100: 16})],
            running=[
                running(
                    1,
                    "nlp",
                    "n0",
                    gpus=8,
                    started=timedelta(minutes=10),
                    runtime=timedelta(minutes=30),
                )
            ],
            pending=[
                pending(10, "nlp", gpus=8, pods=2, waited=timedelta(minutes=5)),
                pending(
                    11,
                    "nlp",
                    gpus=4,
                    waited=timedelta(minutes=4),
                    runtime_limit=timedelta(minutes=30),
                ),
            ],
        )
    )
    assert result.admissions == ()
    small = result.status(11)
    assert small is not None
    assert small.binding.code.value == "Priority"
    assert small.binding.message == (
        "position 2 of 2 in queue training; its team's free quota is held for job 10 ahead of "
        "it, which starting this job would delay"
    )
    assert small.binding.details["held_for_job"] == 10


def behind_a_quota_blocked_job() -> Snapshot:
    """One 16-GPU node. Team vision's job 1 (8 GPUs) ends in 10 min; nlp's job 2 (4 GPUs, all
    of nlp's quota) in 40 min; 4 GPUs are free. Waiting, in plan order: nlp's job 10 (4 GPUs,
    blocked by its quota until 40 min), vision's job 11 (12 GPUs, 30 min: fits from 10 min,
    ends when job 10 starts) and vision's job 12 (4 GPUs, 20 min: fits now, but would still
    hold 4 of the 12 GPUs job 11 needs at 10 min)."""
    return snapshot(
        nodes=[node("n0", gpus=16)],
        queues=QUEUES,
        teams=[team("vision", {H100: 16}), team("nlp", {H100: 4})],
        running=[
            running(
                1,
                "vision",
                "n0",
                gpus=8,
                started=timedelta(minutes=20),
                runtime=timedelta(minutes=30),
            ),
            running(
                2, "nlp", "n0", gpus=4, started=timedelta(minutes=20), runtime=timedelta(minutes=60)
            ),
        ],
        pending=[
            pending(10, "nlp", gpus=4, waited=timedelta(minutes=3)),
            pending(
                11,
                "vision",
                gpus=12,
                waited=timedelta(minutes=2),
                runtime_limit=timedelta(minutes=30),
            ),
            pending(
                12,
                "vision",
                gpus=4,
                waited=timedelta(minutes=1),
                runtime_limit=timedelta(minutes=20),
            ),
        ],
    )


def test_every_blocked_job_keeps_its_reservation_not_only_the_first() -> None:
    # Conservative backfill: job 12 would not delay job 10 (it ends first), but it would push
    # job 11, the second blocked job, from 10 to 20 minutes: it waits, and is told for whom.
    start = behind_a_quota_blocked_job()
    result = plan(start)
    assert result.admissions == ()
    second, later = result.status(11), result.status(12)
    assert second is not None and later is not None
    assert second.estimated_start.at == NOW + timedelta(minutes=10)
    assert later.binding.code.value == "Priority"
    assert later.binding.details["held_for_job"] == 11
    started = play(start)
    assert started[11] == NOW + timedelta(minutes=10)
    assert started[10] == NOW + timedelta(minutes=40)
    assert started[12] == NOW + timedelta(minutes=40)


def test_a_job_that_fits_a_hole_before_every_reservation_still_starts_now() -> None:
    # The same, but job 12 runs at most 10 minutes: it ends before job 11 needs its GPUs.
    start = behind_a_quota_blocked_job()
    short = [
        replace(job, runtime_limit=timedelta(minutes=10)) if job.id == 12 else job
        for job in start.pending
    ]
    result = plan(replace(start, pending=tuple(short)))
    assert [a.job_id for a in result.admissions] == [12]
    assert result.admissions[0].backfilled
    second = result.status(11)
    assert second is not None and second.estimated_start.at == NOW + timedelta(minutes=10)


def test_a_job_submitted_later_never_delays_the_bound_of_a_job_ahead_of_it() -> None:
    # What a member is told at submit ("at the latest") holds against later submissions: a
    # later job of the same priority starts only where it delays no job ahead of it. (Team
    # vision comes after nlp in fair-share order, so its new jobs are behind every job.) On one
    # 32-GPU node, so that which node a job lands on cannot matter: across nodes a later job
    # can, rarely, change the node a job ahead is placed on and so its start (docs/admission.md).
    for seed in range(40):
        start = mixed(seed, one_node=True)
        before = {s.job_id: s.estimated_start.at for s in plan(start).pending}
        rng = random.Random(seed)
        for extra in range(4):
            pods, gpus = rng.choice(SHAPES)
            later = pending(
                50 + extra,
                "vision",
                gpus=gpus,
                pods=pods,
                waited=timedelta(seconds=0),
                runtime_limit=timedelta(minutes=rng.choice([5, 10, 15, 30])),
            )
            start = replace(start, pending=(*start.pending, later))
            after = {s.job_id: s.estimated_start.at for s in plan(start).pending}
            for job_id, at in before.items():
                assert at is not None and after[job_id] is not None
                assert after[job_id] <= at, (seed, extra, job_id, at, after[job_id])


def _mixed_with_history() -> Snapshot:
    """``mixed(3)`` with every pending job's runtime forecast, so the four scenarios differ."""
    start = mixed(3)
    history = Forecast(0.5, 0.25, 0.75)
    return replace(start, pending=tuple(replace(j, forecast=history) for j in start.pending))


def _every_interval_holds_likely_under_the_latest(result: Plan) -> None:
    for status in result.pending:
        estimate = status.estimated_start
        assert estimate.at is not None and estimate.likely is not None
        assert estimate.range_low is not None and estimate.range_high is not None
        assert estimate.range_low <= estimate.likely <= estimate.range_high <= estimate.at


def test_a_replay_budget_for_fewer_than_two_passes_runs_none(monkeypatch) -> None:
    # The first scenario's replay runs the engine's own passes only while the budget holds two
    # of them, each a check per waiting job and the moments the plan's pass's shadows walked:
    # one would make a single moment exact for as much as simulating all the rest.
    # Below that every scenario simulates from the start, with the same admissions.
    import queues.admission.engine as engine
    import queues.admission.forecast as forecast

    costs: list[int] = []
    budgets: list[int] = []
    real_forecast, real_replay = engine.forecast, forecast._replay

    def spy_forecast(*args, **kwargs):  # type: ignore[no-untyped-def]
        costs.append(kwargs["walked"])
        return real_forecast(*args, **kwargs)

    def spy_replay(state, asks, probes, ratio, started, budget, *rest):  # type: ignore[no-untyped-def]
        budgets.append(budget)
        return real_replay(state, asks, probes, ratio, started, budget, *rest)

    monkeypatch.setattr(engine, "forecast", spy_forecast)
    monkeypatch.setattr(forecast, "_replay", spy_replay)
    start = _mixed_with_history()
    waiting = sum(1 for s in plan(start, replay_budget=0).pending if s.reasons)
    assert costs[-1] > 0  # the pass's shadows walked
    cost = waiting + costs[-1]
    budgets.clear()
    two = plan(start, replay_budget=2 * cost)
    assert budgets[0] == 2 * cost
    budgets.clear()
    one = plan(start, replay_budget=2 * cost - 1)
    assert budgets == [0, 0, 0, 0]
    assert one.admissions == two.admissions
    _every_interval_holds_likely_under_the_latest(one)


def test_a_queue_longer_than_eight_passes_of_the_budget_is_replayed_exactly_only_once(
    monkeypatch,
) -> None:
    # Each scenario's replay runs the engine's own passes while its budget lasts; the later
    # scenarios do only while the budget holds eight passes over the waiting jobs, else the
    # first (at the latest) alone runs them and the others simulate from the start.
    import queues.admission.forecast as forecast

    budgets: list[int] = []
    real = forecast._replay

    def spy(state, asks, probes, ratio, started, budget, *rest):  # type: ignore[no-untyped-def]
        budgets.append(budget)
        return real(state, asks, probes, ratio, started, budget, *rest)

    monkeypatch.setattr(forecast, "_replay", spy)
    start = _mixed_with_history()
    waiting = sum(1 for s in plan(start, replay_budget=0).pending if s.reasons)
    budgets.clear()
    exact = plan(start, replay_budget=waiting * forecast.LATER_EXACT_PASSES)
    assert budgets == [waiting * forecast.LATER_EXACT_PASSES] * 4
    budgets.clear()
    once = plan(start, replay_budget=waiting * forecast.LATER_EXACT_PASSES - 1)
    assert budgets == [waiting * forecast.LATER_EXACT_PASSES - 1, 0, 0, 0]
    # the same admissions; every waiting job still has its interval around "likely", under
    # "at the latest"
    assert once.admissions == exact.admissions
    _every_interval_holds_likely_under_the_latest(once)
