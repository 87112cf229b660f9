"""Preemption: which running jobs to stop so that a blocked job with an entitlement that may
preempt starts (``preempt``), and how the victims' GPUs stay held through their grace period."""

from __future__ import annotations

from datetime import timedelta

from queues.admission.asks import Ask
from queues.admission.backfill import fit_shadowed
from queues.admission.diagnose import entitlement, time_text
from queues.admission.fit import Option, fit_class
from queues.admission.pass_state import Outcome, Pass, admit, versions
from queues.admission.plan import Preemption
from queues.admission.reasons import PendingReason, span_text
from queues.admission.snapshot import (
    CapacityKind,
)
from queues.admission.state import Alloc, PodSpot, State

# ---------------------------------------------------------------------- preemption


def preempt(run: Pass, ask: Ask, outcome: Outcome) -> bool:
    """Free capacity for ``ask`` by preempting the fewest jobs that lose the least work.

    Only entitled demand preempts: a reservation holder within its reservation, or a team within
    its nominal quota. Victims are jobs of graceful/preemptible queues that are borrowed (any
    team: lenders reclaim, while that team uses more than its nominal quota, see
    ``_reclaimable``) or belong to the same team with lower priority. Never in a class where
    a job ahead waits on an EASY shadow, or on the team's quota shadow: that job counts on
    those jobs' capacity.
    """
    state = run.state
    key = (ask.key, versions(state, ask))
    if key in run.no_preempt:
        return False
    if _waits_for_stopping(state, ask):
        run.no_preempt.add(key)
        return False
    for gpu_class in ask.classes:
        held = (ask.job.team, gpu_class)
        if run.shadows.get(gpu_class) or run.quota_shadows.get(held):
            continue
        options = [
            o for o in entitlement(state, ask, gpu_class) if o[0] is not CapacityKind.BORROWED
        ]
        if not options:
            continue
        candidates = sorted(
            (
                a
                for a in state.class_allocs[gpu_class].values()
                if a.preemptible
                and a.job_id not in run.fresh
                and (
                    a.kind is CapacityKind.BORROWED
                    or (a.team == ask.job.team and a.rank < ask.rank)
                )
            ),
            key=lambda a: (a.lost_work, a.rank, -a.eq, a.job_id),
        )
        if not candidates:
            continue
        for option in options:
            victims = _choose_victims(run, ask, gpu_class, option, candidates)
            if victims is None:
                continue
            fit = fit_shadowed(run, ask, gpu_class, [option], reserved=False)
            assert fit is not None
            grace = max((v.grace for v in victims), default=timedelta(0))
            start = state.now + grace
            _hold_until_stopped(state, victims, admit(run, ask, fit, start=start))
            for victim in victims:
                run.preemptions.append(
                    Preemption(
                        job_id=victim.job_id,
                        reason=_preemption_reason(state, ask, victim, option),
                        grace_period=victim.grace,
                        for_job=ask.job.id,
                        lost_work=victim.lost_work,
                    )
                )
            outcome.preempting = tuple(v.job_id for v in victims)
            outcome.start = start
            names = ", ".join(str(v.job_id) for v in victims)
            note = (
                f"preempting job{'s' if len(victims) > 1 else ''} {names} "
                f"(grace {span_text(grace)}); "
                f"starts by {time_text(start)}"
            )
            first = outcome.reasons[0]
            outcome.reasons[0] = PendingReason(first.code, first.message, first.details, note)
            return True
    run.no_preempt.add(key)
    return False


def _waits_for_stopping(state: State, ask: Ask) -> bool:
    """Whether ``ask`` would fit one of its classes, under an entitlement that may preempt, once
    the pods already stopping there are gone (jobs stopped in an earlier cycle, or preempted
    earlier in this pass): it then waits for them, at most their grace period, rather than
    preempting more work for GPUs about to be free."""
    for gpu_class in ask.classes:
        stopping = [a for a in state.class_allocs[gpu_class].values() if a.stopping]
        if not stopping:
            continue
        options = [
            o for o in entitlement(state, ask, gpu_class) if o[0] is not CapacityKind.BORROWED
        ]
        if not options:
            continue
        for alloc in stopping:
            state.give_back(alloc)
        fits = fit_class(state, ask, gpu_class, options) is not None
        for alloc in stopping:
            state.take(alloc)
        if fits:
            return True
    return False


def _hold_until_stopped(state: State, victims: list[Alloc], preemptor: Alloc) -> None:
    """A preempted job's pods keep its GPUs until they are gone, at the end of its grace period.
    Its preemptor holds its part of them from now on (it starts when the last victim is gone);
    the rest stays held by the victim's stopping pods until then, so no job admitted in this
    pass lands on GPUs that are not free yet. That remainder counts against nothing but
    capacity: the victim's quota, reservation and user limits are free from now on, as before."""
    reused: dict[tuple[int, int], list[int]] = {}  # (pool, local node) → [devices, HBM GB]
    for spot in preemptor.spots:
        entry = reused.setdefault((id(spot.pool), spot.local), [0, 0])
        entry[0] += spot.devices
        entry[1] += spot.hbm
    for victim in victims:
        spots: list[PodSpot] = []
        for spot in victim.spots:
            entry = reused.get((id(spot.pool), spot.local), [0, 0])
            devices, hbm = min(spot.devices, entry[0]), min(spot.hbm, entry[1])
            entry[0] -= devices
            entry[1] -= hbm
            left = spot.devices - devices
            if left > 0 or spot.hbm > hbm:
                unit = spot.pool.unit[spot.local]
                spots.append(PodSpot(spot.pool, spot.local, left, spot.hbm - hbm, left * unit))
        if not spots:
            continue
        state.take(
            Alloc(
                job_id=-victim.job_id,  # apart from the job itself, which went back to pending
                team="",
                queue="",
                user="",
                gpu_class=victim.gpu_class,
                kind=victim.kind,
                reservation_id=None,
                spots=spots,
                eq=sum(spot.eq for spot in spots),
                end=state.now + victim.grace,
                rank=victim.rank,
                preemptible=False,
                grace=victim.grace,
                lost_work=timedelta(0),
                stopping=True,
                counts=False,
            )
        )


def _choose_victims(
    run: Pass, ask: Ask, gpu_class: str, option: Option, candidates: list[Alloc]
) -> list[Alloc] | None:
    """Greedy by least lost work until the job fits, then drop every victim it fits without.
    Leaves the state with the victims removed, or unchanged when preemption cannot help."""
    state = run.state
    chosen: list[Alloc] = []
    fits = False
    for alloc in candidates:
        if not _reclaimable(state, ask, alloc, option):
            continue
        state.give_back(alloc)
        chosen.append(alloc)
        if fit_shadowed(run, ask, gpu_class, [option], reserved=False) is not None:
            fits = True
            break
    if not fits:
        for alloc in reversed(chosen):
            state.take(alloc)
        return None
    for alloc in sorted(chosen, key=lambda a: (-a.lost_work.total_seconds(), a.job_id)):
        state.take(alloc)
        if fit_shadowed(run, ask, gpu_class, [option], reserved=False) is None:
            state.give_back(alloc)
    victims = [a for a in chosen if not a.live]
    return sorted(victims, key=lambda a: a.job_id)


def _reclaimable(state: State, ask: Ask, alloc: Alloc, option: Option) -> bool:
    """Whether candidate ``alloc`` may be preempted for ``ask`` now (victims already chosen are
    given back, so this follows them).

    The team's own lower-priority work always may. A borrowed job (reclaimed as a whole: a
    running job cannot shrink) may be reclaimed by a reservation holder, whose idle GPUs any
    borrowed work may sit on, and by a team reclaiming its nominal quota only while the job's
    team still borrows, i.e. uses more than its own nominal quota. A borrowed job fills its
    team's nominal room first, so once the victims taken from a team cover what it borrows,
    its other borrowed jobs run within its guarantee and are not taken for a lender.
    """
    if alloc.team == ask.job.team and alloc.rank < ask.rank:
        return True
    if option[0] is CapacityKind.RESERVED:
        return True
    return state.borrowing((alloc.team, alloc.gpu_class)) > 0


def _preemption_reason(state: State, ask: Ask, victim: Alloc, option: Option) -> str:
    kind, rid, _ = option
    if kind is CapacityKind.RESERVED:
        label = state.reservations[rid].label if rid is not None else "a reservation"
        why = f"{label} of team {ask.job.team} reclaims its {victim.gpu_class} GPUs"
    elif victim.kind is CapacityKind.BORROWED:
        why = f"team {ask.job.team} reclaims its nominal {victim.gpu_class} quota"
    else:
        why = f"higher-priority job {ask.job.id} of team {ask.job.team} needs the GPUs"
    lost = _duration(victim.lost_work)
    return f"{why} for job {ask.job.id} (queue {ask.queue.name}); lost work {lost}"


def _duration(value: timedelta) -> str:
    minutes = int(value.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
