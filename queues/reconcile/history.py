"""The operations history: what each reconcile cycle saw, stored pre-aggregated so that /ops/ and
/metrics read a few rows instead of scanning jobs (docs/operations-dashboard.md).

Per cycle, from the snapshot the engine planned on and the plan it made:

* each GPU class's capacity by state and its fragmentation (``class_capacity_and_holders``) → one
  ``CapacitySample`` per class and minute, and each node's GPUs in use on ``Node.gpus_in_use``;
* pending jobs by queue and binding reason → ``PendingSample`` rows for the minute;
* each team's GPUs held and decayed usage → ``TeamStats``;
* each hour that has passed, its capacity samples summed → ``CapacityHour``;
* once a minute, each queue's waits of the day so far (and of any past day not rolled up yet)
  → ``QueueWaitDay``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, cast

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.db.models.functions import TruncHour

from queues import admission as engine
from queues.catalog.selectors import percentile
from queues.models import (
    CapacityHour,
    CapacitySample,
    GpuClass,
    Job,
    Node,
    PendingSample,
    Queue,
    QueueWaitDay,
    Team,
    TeamStats,
)
from queues.rates import gpu_amount

# Gang shapes fragmentation is reported for: pods of this many whole GPUs on one node.
SLOT_SIZES = (1, 2, 4, 8)
# Past days rolled up when the history starts or after an outage (older ones are not).
WAIT_DAYS_BACKFILL = 31
# How far back a minute between a long queue's refreshes looks for their last pending counts
# (refreshes come at most a minute apart, plus the time one takes).
PENDING_CARRIED_FOR = timedelta(minutes=3)


@dataclass
class ClassCapacity:
    """One GPU class's GPU-equivalents by state now (the parts are disjoint; their sum is the
    class's capacity), and what is free as whole GPUs per in-service node (for
    fragmentation)."""

    gpu_class: str
    in_use: Fraction = Fraction(0)
    free: Fraction = Fraction(0)
    reserved_idle: Fraction = Fraction(0)
    unhealthy: Fraction = Fraction(0)
    maintenance: Fraction = Fraction(0)
    outside: Fraction = Fraction(0)
    free_whole: list[int] = field(default_factory=list)

    @property
    def largest_free(self) -> int:
        return max(self.free_whole, default=0)

    def slots(self, size: int) -> int:
        """How many pods of ``size`` whole GPUs fit on the free GPUs now, one pod per node
        share: the sum over nodes of free // size."""
        return sum(free // size for free in self.free_whole)


def _node_capacity(node: engine.Node, spec: engine.GpuClass | None) -> tuple[Fraction, Fraction]:
    """(GPU-equivalents the node offers, those pods the portal did not create hold)."""
    if node.mig:
        shares = spec.spec.mig_profiles if spec is not None else {}
        total = sum((s.total * shares.get(s.profile, Fraction(0)) for s in node.mig), Fraction(0))
        outside = sum(
            (s.outside * shares.get(s.profile, Fraction(0)) for s in node.mig), Fraction(0)
        )
        return total, min(outside, total)
    return Fraction(node.gpus), min(node.outside_gpu_eq, Fraction(node.gpus))


def class_capacity_and_holders(
    snapshot: engine.Snapshot,
) -> tuple[list[ClassCapacity], dict[str, Fraction]]:
    """Every GPU class's capacity by state at ``snapshot.now``, and each node's GPU-equivalents
    the portal's jobs hold (terminating ones included: their pods still hold them).

    A node's GPUs are all in its state (unhealthy before maintenance before in service) but
    what outside pods hold, which is ``outside`` whatever the state: the node-state history's
    rule (``queues.reconcile.nodes.node_state_amounts``). On an in-service node, what the
    portal's jobs do not hold is free; reservations in force not used by their holders' jobs
    make that much of the free capacity ``reserved_idle`` (at most what is free)."""
    specs = {g.name: g for g in snapshot.gpu_classes}
    held_on: dict[str, Fraction] = defaultdict(Fraction)
    reserved_use: dict[int, Fraction] = defaultdict(Fraction)
    for job in snapshot.running:
        for node_name in job.pods:
            held_on[node_name] += job.gpu_eq_per_pod
        if job.reservation_id is not None:
            reserved_use[job.reservation_id] += job.gpu_eq
    classes: dict[str, ClassCapacity] = {}
    for node in snapshot.nodes:
        c = classes.setdefault(node.gpu_class, ClassCapacity(node.gpu_class))
        total, outside = _node_capacity(node, specs.get(node.gpu_class))
        c.outside += outside
        rest = total - outside
        if not node.healthy:
            c.unhealthy += rest
        elif node.maintenance is not engine.MaintenanceState.NONE:
            c.maintenance += rest
        else:
            held = min(held_on.get(node.name, Fraction(0)), rest)
            c.in_use += held
            c.free += rest - held
            if not node.mig and node.time_slice_replicas == 1:
                c.free_whole.append(math.floor(rest - held))
    for reservation in snapshot.reservations:
        held_class = classes.get(reservation.gpu_class)
        if held_class is None or not reservation.active_at(snapshot.now):
            continue
        idle = max(reservation.amount - reserved_use.get(reservation.id, Fraction(0)), Fraction(0))
        moved = min(idle, held_class.free)
        held_class.free -= moved
        held_class.reserved_idle += moved
    return [classes[name] for name in sorted(classes)], dict(held_on)


def minute_of(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def history_record(snapshot: engine.Snapshot, plan: engine.Plan, *, now: datetime) -> None:
    """Store what this cycle saw (see the module docstring). Idempotent per minute: a rerun
    overwrites the minute's rows with the same or newer numbers."""
    minute = minute_of(now)
    class_ids = dict(GpuClass.objects.values_list("name", "pk"))
    queue_ids = dict(Queue.objects.values_list("name", "pk"))
    capacities, held_on = class_capacity_and_holders(snapshot)
    samples = [
        CapacitySample(
            at=minute,
            gpu_class_id=class_ids[c.gpu_class],
            in_use=gpu_amount(c.in_use),
            free=gpu_amount(c.free),
            reserved_idle=gpu_amount(c.reserved_idle),
            unhealthy=gpu_amount(c.unhealthy),
            maintenance=gpu_amount(c.maintenance),
            outside=gpu_amount(c.outside),
            largest_free=c.largest_free,
            slots={str(size): c.slots(size) for size in SLOT_SIZES},
        )
        for c in capacities
        if c.gpu_class in class_ids
    ]
    pending: dict[tuple[int, str], int] = defaultdict(int)
    queue_of = {job.id: job.queue for job in snapshot.pending}
    for status in plan.pending:
        queue = queue_of.get(status.job_id)
        if queue in queue_ids and status.reasons:
            pending[(queue_ids[queue], str(status.reasons[0].code))] += 1
    with transaction.atomic():
        CapacitySample.objects.bulk_create(
            samples,
            update_conflicts=True,
            unique_fields=["gpu_class", "at"],
            update_fields=[
                "in_use",
                "free",
                "reserved_idle",
                "unhealthy",
                "maintenance",
                "outside",
                "largest_free",
                "slots",
            ],
        )
        # A plan that explained only some of the waiting jobs (a cycle between refreshes of a
        # long queue) cannot count them: the minute keeps the last full plan's counts.
        if plan.partial:
            _pending_carried(minute)
        else:
            # A reason no job has any more this minute must not keep an earlier cycle's count.
            PendingSample.objects.filter(at=minute).delete()
            PendingSample.objects.bulk_create(
                [
                    PendingSample(at=minute, queue_id=queue_id, code=code, jobs=jobs)
                    for (queue_id, code), jobs in sorted(pending.items())
                ]
            )
    _nodes_in_use_store(held_on)
    _team_stats_store(snapshot, now=now)
    capacity_hours_rollup(now=now)
    wait_days_refresh(now=now)


def _pending_carried(minute: datetime) -> None:
    """A minute that a long queue's full refresh has not reached yet (they come up to a minute
    apart) gets the last refresh's counts, so that the dashboard's "pending now" and its hourly
    averages do not count it as a minute with no job waiting."""
    if PendingSample.objects.filter(at=minute).exists():
        return
    since = minute - PENDING_CARRIED_FOR
    last = PendingSample.objects.filter(at__lt=minute, at__gte=since).aggregate(at=Max("at"))["at"]
    if last is None:
        return
    PendingSample.objects.bulk_create(
        [
            PendingSample(at=minute, queue_id=queue_id, code=code, jobs=jobs)
            for queue_id, code, jobs in PendingSample.objects.filter(at=last).values_list(
                "queue_id", "code", "jobs"
            )
        ]
    )


CAPACITY_STATES = ("in_use", "free", "reserved_idle", "unhealthy", "maintenance", "outside")


def hour_of(at: datetime) -> datetime:
    return minute_of(at).replace(minute=0)


def capacity_hours_rollup(*, now: datetime) -> None:
    """Sum the capacity samples of every hour that has passed and is not rolled up yet (back
    to ``WAIT_DAYS_BACKFILL`` days) into ``CapacityHour`` rows: one query, and none when the
    last hour is done already."""
    current = hour_of(now)
    last = CapacityHour.objects.aggregate(hour=Max("hour"))["hour"]
    if last is not None and last >= current - timedelta(hours=1):
        return
    start = current - timedelta(days=WAIT_DAYS_BACKFILL)
    if last is not None:
        start = max(start, last + timedelta(hours=1))
    # Annotated with **sums: typed as plain dicts.
    rows = cast(
        Iterable[dict[str, Any]],
        CapacitySample.objects.filter(at__gte=start, at__lt=current)
        .annotate(hour=TruncHour("at", tzinfo=UTC))
        .values("gpu_class_id", "hour")
        .annotate(minutes=Count("id"), **{f"sum_{s}": Sum(s) for s in CAPACITY_STATES})
        .order_by(),
    )
    CapacityHour.objects.bulk_create(
        [
            CapacityHour(
                hour=row["hour"],
                gpu_class_id=row["gpu_class_id"],
                minutes=row["minutes"],
                **{s: row[f"sum_{s}"] for s in CAPACITY_STATES},
            )
            for row in rows
        ],
        ignore_conflicts=True,
    )


def _nodes_in_use_store(held_on: dict[str, Fraction]) -> None:
    changed = []
    for node in Node.objects.only("id", "name", "gpus_in_use"):
        value = gpu_amount(held_on.get(node.name, Fraction(0)))
        if node.gpus_in_use != value:
            node.gpus_in_use = value
            changed.append(node)
    Node.objects.bulk_update(changed, ["gpus_in_use"], batch_size=500)


def _team_stats_store(snapshot: engine.Snapshot, *, now: datetime) -> None:
    held: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for job in snapshot.running:
        held[job.team][job.gpu_class] += job.gpu_eq
    team_ids = dict(Team.objects.values_list("name", "pk"))
    rows = [
        TeamStats(
            team_id=team_ids[team.name],
            held={k: str(gpu_amount(v)) for k, v in sorted(held[team.name].items())},
            recent_usage=Decimal(team.recent_usage.numerator)
            / Decimal(team.recent_usage.denominator),
            computed_at=now,
        )
        for team in snapshot.teams
        if team.name in team_ids
    ]
    for row in rows:
        row.recent_usage = row.recent_usage.quantize(Decimal("0.001"))
    # Only the rows whose numbers moved are written (most teams' do not between two cycles:
    # rewriting 2,000 teams' rows was half a second of every cycle in Kueue's large-scale
    # replay); the others are only marked computed now, in one statement.
    stored = {
        team_id: (held, usage)
        for team_id, held, usage in TeamStats.objects.values_list("team_id", "held", "recent_usage")
    }
    moved = [row for row in rows if stored.get(row.team_id) != (row.held, row.recent_usage)]
    with transaction.atomic():
        TeamStats.objects.bulk_create(
            moved,
            update_conflicts=True,
            unique_fields=["team"],
            update_fields=["held", "recent_usage", "computed_at"],
        )
        if len(moved) < len(rows):
            computed = [row.team_id for row in rows]
            TeamStats.objects.filter(team_id__in=computed).exclude(computed_at=now).update(
                computed_at=now
            )


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def wait_day_compute(*, day: date, now: datetime) -> list[QueueWaitDay]:
    """Every active queue's waits of the jobs admitted on ``day`` (UTC), up to ``now``: the
    wait is admitted minus submitted (the catalog's), within target when it is at most the
    queue's ``expected_wait_target``."""
    start, end = day_bounds(day)
    queues = list(Queue.objects.active())
    waits: dict[int, list[timedelta]] = defaultdict(list)
    for queue_id, submitted, admitted in (
        Job.objects.filter(admitted_at__gte=start, admitted_at__lt=min(end, now))
        .order_by()
        .values_list("queue_id", "submitted_at", "admitted_at")
    ):
        if admitted is not None:  # the filter admits no other
            waits[queue_id].append(admitted - submitted)
    return [
        QueueWaitDay(
            queue=q,
            day=day,
            admitted=len(waits[q.pk]),
            within_target=sum(1 for w in waits[q.pk] if w <= q.expected_wait_target),
            target=q.expected_wait_target,
            wait_p50=percentile(waits[q.pk], 0.5),
            wait_p90=percentile(waits[q.pk], 0.9),
            computed_at=now,
        )
        for q in queues
    ]


def wait_days_refresh(*, now: datetime) -> None:
    """Today's rows once a minute; each past day (back to ``WAIT_DAYS_BACKFILL`` days) once,
    after it has ended."""
    today = now.astimezone(UTC).date()
    fresh = QueueWaitDay.objects.filter(day=today, computed_at__gte=minute_of(now)).exists()
    days = [] if fresh else [today]
    done = set(
        QueueWaitDay.objects.filter(
            day__gte=today - timedelta(days=WAIT_DAYS_BACKFILL), day__lt=today
        )
        .values_list("day", flat=True)
        .distinct()
    )
    last = max(done, default=None)
    for back in range(1, WAIT_DAYS_BACKFILL + 1):
        day = today - timedelta(days=back)
        if last is not None and day <= last:
            break
        # A day is final once it has ended and its last row was computed after its end.
        days.append(day)
    stale_yesterday = QueueWaitDay.objects.filter(
        day=today - timedelta(days=1), computed_at__lt=day_bounds(today)[0]
    ).exists()
    if stale_yesterday:
        days.append(today - timedelta(days=1))
    for day in sorted(set(days)):
        rows = wait_day_compute(day=day, now=now)
        QueueWaitDay.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["queue", "day"],
            update_fields=[
                "admitted",
                "within_target",
                "target",
                "wait_p50",
                "wait_p90",
                "computed_at",
            ],
        )
