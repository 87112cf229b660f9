"""Idle capacity beside the bill, never charged to a team: per GPU class (and its node pool),
the allocatable GPU-hours the node-state intervals record, split into used (by the portal's
usage intervals, on the nodes and in the states where they ran), idle, kept warm by a floor
(idle on nodes a queue's warm floor held, ``WarmHold``), reserved-but-idle, unhealthy,
maintenance and used outside the portal. Exact (Fractions from whole microseconds) until each
figure is rounded once; the parts add up to the allocatable hours exactly."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db import connection
from django.db.models import Q

from chargeback.statements import _db_time, exact_sums, extremes, microseconds_sql, statement
from queues.models import (
    GpuClass,
    NodePool,
    NodeState,
    NodeStateInterval,
    Reservation,
    WarmHold,
)
from queues.rates import MICROSECONDS_PER_HOUR, round_hours


@dataclass(frozen=True)
class ExactSplit:
    """A class's GPU-hours by what they did, exact."""

    gpu_class: str
    pool: str  # the class's node pool, "" without one
    used: Fraction
    idle: Fraction  # other idle: not kept warm, not reserved
    warm_idle: Fraction  # idle on nodes a warm floor held
    reserved_idle: Fraction
    unhealthy: Fraction
    maintenance: Fraction
    outside: Fraction
    allocatable: Fraction
    used_without_node_history: Fraction


@dataclass(frozen=True)
class CapacitySplit:
    """The same, each part rounded once (hours to 0.001, half up); ``allocatable`` is the sum
    of the rounded parts."""

    gpu_class: str
    pool: str
    used: Decimal
    idle: Decimal
    warm_idle: Decimal
    reserved_idle: Decimal
    unhealthy: Decimal
    maintenance: Decimal
    outside: Decimal
    used_without_node_history: Decimal

    @property
    def allocatable(self) -> Decimal:
        return (
            self.used
            + self.idle
            + self.warm_idle
            + self.reserved_idle
            + self.unhealthy
            + self.maintenance
            + self.outside
        )


PARTS = ("used", "idle", "warm_idle", "reserved_idle", "unhealthy", "maintenance", "outside")


def exact_capacity_split(*, start: datetime, end: datetime, now: datetime) -> list[ExactSplit]:
    """The split of [``start``, ``end``) per GPU class with node history there (open intervals
    count until ``now``)."""
    end = min(end, now)
    if end <= start:
        return []
    held: dict[tuple[int, str], Fraction] = {}
    rows = NodeStateInterval.objects.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start), started_at__lt=end
    ).values_list(
        "gpu_class_id", "state", "amount_numerator", "amount_denominator", "started_at", "ended_at"
    )
    # Node states change a few times a month per node: few rows, summed here exactly.
    for class_id, state, numerator, denominator, started, ended in rows:
        lo, hi = max(started, start), min(ended or now, end)
        if hi > lo:
            hours = Fraction(_us(hi - lo) * numerator, MICROSECONDS_PER_HOUR * denominator)
            held[(class_id, state)] = held.get((class_id, state), Fraction(0)) + hours
    used = _used_by_state(start=start, end=end, now=now)
    total_used = {
        line.key["gpu_class"]: line.gpu_hours_exact
        for line in _exact_use_by_class(start=start, end=end, now=now)
    }
    names = dict(GpuClass.objects.values_list("pk", "name"))
    pools = dict(NodePool.objects.values_list("gpu_class_id", "name"))
    reserved = _reserved_hours(start=start, end=end)
    warm = _warm_idle_hours(start=start, end=end, now=now)
    splits = []
    for class_id in sorted({c for c, _ in held}, key=lambda c: names[c]):

        def part(state: str, class_id: int = class_id) -> Fraction:
            return held.get((class_id, state), Fraction(0)) - used.get((class_id, state), 0)

        attributed = sum((v for (c, _), v in used.items() if c == class_id), Fraction(0))
        free = part(NodeState.AVAILABLE)
        reserved_idle: Fraction = min(
            max(reserved.get(class_id, Fraction(0)), Fraction(0)), max(free, Fraction(0))
        )
        # Reserved-but-idle is counted first (as before node pools); warm idle is what the
        # floors' holds left idle, within what is neither used nor reserved.
        warm_idle = min(
            max(warm.get(class_id, Fraction(0)), Fraction(0)),
            max(free - reserved_idle, Fraction(0)),
        )
        splits.append(
            ExactSplit(
                gpu_class=names[class_id],
                pool=pools.get(class_id, ""),
                used=attributed,
                idle=free - reserved_idle - warm_idle,
                warm_idle=warm_idle,
                reserved_idle=reserved_idle,
                unhealthy=part(NodeState.UNHEALTHY),
                maintenance=part(NodeState.MAINTENANCE),
                outside=held.get((class_id, NodeState.OUTSIDE), Fraction(0)),
                allocatable=sum((v for (c, _), v in held.items() if c == class_id), Fraction(0)),
                used_without_node_history=total_used.get(names[class_id], Fraction(0)) - attributed,
            )
        )
    return splits


def capacity_split(*, start: datetime, end: datetime, now: datetime) -> list[CapacitySplit]:
    return [
        CapacitySplit(
            gpu_class=s.gpu_class,
            pool=s.pool,
            **{name: round_hours(getattr(s, name)) for name in PARTS},
            used_without_node_history=round_hours(s.used_without_node_history),
        )
        for s in exact_capacity_split(start=start, end=end, now=now)
    ]


@dataclass(frozen=True)
class _ClassUse:
    key: dict[str, str]
    gpu_hours_exact: Fraction


def _exact_use_by_class(*, start: datetime, end: datetime, now: datetime) -> list[_ClassUse]:
    sums: dict[int, Fraction] = {}
    for (class_id, _currency), acc in exact_sums(
        start=start, end=end, now=now, group_by=("gpu_class",)
    ).items():
        sums[class_id] = sums.get(class_id, Fraction(0)) + acc.gpu
    names = dict(GpuClass.objects.values_list("pk", "name"))
    return [_ClassUse({"gpu_class": names[c]}, v) for c, v in sums.items()]


def _used_by_state(
    *, start: datetime, end: datetime, now: datetime
) -> dict[tuple[int, str], Fraction]:
    """GPU-hours of usage intervals on each node while it was in each state, by the node's
    class and state, summed in the database."""
    vendor = connection.vendor
    greatest, least = extremes(vendor)
    micro = microseconds_sql(vendor, "p.ps", "p.pe")
    sql = f"""
        SELECT p.gpu_class_id, p.state, p.share_denominator,
               SUM({micro} * p.devices * p.share_numerator)
        FROM (
            SELECT ns.gpu_class_id, ns.state, i.share_denominator, i.share_numerator, i.devices,
                   {greatest}(i.started_at, ns.started_at, %(ws)s) AS ps,
                   {least}(COALESCE(i.ended_at, %(now)s), COALESCE(ns.ended_at, %(now)s),
                           %(we)s) AS pe
            FROM queues_usageinterval i
            JOIN queues_node n ON n.name = i.node
            JOIN queues_nodestateinterval ns ON ns.node_id = n.id AND ns.state <> 'outside'
            WHERE i.started_at < %(we)s AND (i.ended_at IS NULL OR i.ended_at > %(ws)s)
              AND ns.started_at < %(we)s AND (ns.ended_at IS NULL OR ns.ended_at > %(ws)s)
        ) p
        WHERE p.pe > p.ps
        GROUP BY p.gpu_class_id, p.state, p.share_denominator
    """
    params = {"ws": _db_time(start), "we": _db_time(end), "now": _db_time(now)}
    used: dict[tuple[int, str], Fraction] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for class_id, state, denominator, gpu_us in cursor.fetchall():
            key = (class_id, state)
            used[key] = used.get(key, Fraction(0)) + Fraction(
                int(gpu_us), MICROSECONDS_PER_HOUR * int(denominator)
            )
    return used


def _reserved_hours(*, start: datetime, end: datetime) -> dict[int, Fraction]:
    """Per class, reserved GPU-hours in the window not used by the reservations' own jobs.
    Reservations are policy as it is now (they keep no history): a reservation removed since is
    not counted."""
    reserved: dict[int, Fraction] = {}
    reservations = list(
        Reservation.objects.filter(active=True).filter(
            Q(starts_at__isnull=True) | Q(starts_at__lt=end, ends_at__gt=start)
        )
    )
    for r in reservations:
        lo = max(r.starts_at or start, start)
        hi = min(r.ends_at or end, end)
        us = int((hi - lo).total_seconds()) * 1_000_000 + (hi - lo).microseconds
        hours = Fraction(us, MICROSECONDS_PER_HOUR) * Fraction(r.amount)
        used = statement(
            start=lo,
            end=hi,
            now=end,
            group_by=("gpu_class",),
            job_ids=list(r.jobs.values_list("pk", flat=True)),
        ).totals.gpu_hours
        reserved[r.gpu_class_id] = reserved.get(r.gpu_class_id, Fraction(0)) + max(
            hours - Fraction(used), Fraction(0)
        )
    return reserved


def _us(span: timedelta) -> int:
    return span.days * 86_400_000_000 + span.seconds * 1_000_000 + span.microseconds


def _warm_idle_hours(*, start: datetime, end: datetime, now: datetime) -> dict[int, Fraction]:
    """Per class, the GPU-hours kept warm by a floor in [``start``, ``end``): the in-service
    GPUs (``available`` node-state intervals) of each node while a warm floor held it
    (``WarmHold``), less the usage intervals on that node meanwhile (a job of the floor's queue
    admitted onto it is seen before the next cycle lets the hold go). Open rows count until
    ``now``."""
    holds = list(
        WarmHold.objects.filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=start), started_at__lt=end
        ).values_list("node_id", "started_at", "ended_at")
    )
    if not holds:
        return {}
    nodes = {node for node, _, _ in holds}
    states = NodeStateInterval.objects.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start),
        started_at__lt=end,
        node_id__in=nodes,
        state=NodeState.AVAILABLE,
    ).values_list(
        "node_id",
        "gpu_class_id",
        "amount_numerator",
        "amount_denominator",
        "started_at",
        "ended_at",
    )
    by_node: dict[int, list[tuple[datetime, datetime]]] = {}
    for node, held_from, held_to in holds:
        by_node.setdefault(node, []).append((held_from, held_to or now))
    warm: dict[int, Fraction] = {}
    for node, class_id, numerator, denominator, started, ended in states:
        for held_from, held_to in by_node[node]:
            lo = max(started, held_from, start)
            hi = min(ended or now, held_to, end, now)
            if hi > lo:
                hours = Fraction(_us(hi - lo) * numerator, MICROSECONDS_PER_HOUR * denominator)
                warm[class_id] = warm.get(class_id, Fraction(0)) + hours
    for class_id, used in _used_while_warm(start=start, end=end, now=now).items():
        warm[class_id] = warm.get(class_id, Fraction(0)) - used
    return warm


def _used_while_warm(*, start: datetime, end: datetime, now: datetime) -> dict[int, Fraction]:
    """GPU-hours of usage intervals on held nodes while held and in service, by class."""
    vendor = connection.vendor
    greatest, least = extremes(vendor)
    micro = microseconds_sql(vendor, "p.ps", "p.pe")
    sql = f"""
        SELECT p.gpu_class_id, p.share_denominator,
               SUM({micro} * p.devices * p.share_numerator)
        FROM (
            SELECT ns.gpu_class_id, i.share_denominator, i.share_numerator, i.devices,
                   {greatest}(i.started_at, ns.started_at, h.started_at, %(ws)s) AS ps,
                   {least}(COALESCE(i.ended_at, %(now)s), COALESCE(ns.ended_at, %(now)s),
                           COALESCE(h.ended_at, %(now)s), %(we)s) AS pe
            FROM queues_usageinterval i
            JOIN queues_node n ON n.name = i.node
            JOIN queues_nodestateinterval ns ON ns.node_id = n.id AND ns.state = 'available'
            JOIN queues_warmhold h ON h.node_id = n.id
            WHERE i.started_at < %(we)s AND (i.ended_at IS NULL OR i.ended_at > %(ws)s)
              AND ns.started_at < %(we)s AND (ns.ended_at IS NULL OR ns.ended_at > %(ws)s)
              AND h.started_at < %(we)s AND (h.ended_at IS NULL OR h.ended_at > %(ws)s)
        ) p
        WHERE p.pe > p.ps
        GROUP BY p.gpu_class_id, p.share_denominator
    """
    params = {"ws": _db_time(start), "we": _db_time(min(end, now)), "now": _db_time(now)}
    used: dict[int, Fraction] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for class_id, denominator, gpu_us in cursor.fetchall():
            used[class_id] = used.get(class_id, Fraction(0)) + Fraction(
                int(gpu_us), MICROSECONDS_PER_HOUR * int(denominator)
            )
    return used
