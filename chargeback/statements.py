"""Statements: usage intervals rated in the database, by the rule of ``queues.rates``.

The database does what grows with the number of intervals: it clips each interval to the report
window, to every rate card's validity window and to every cost center's window of its team
(GREATEST/LEAST), and sums whole microseconds per group. What it returns is exact integers for a
handful of groups (one per line, rate card and share denominator); Python turns those into
GPU-hours and money with Fractions, so the result is exactly what ``queues.rates.rate_interval``
gives interval by interval, on SQLite as on PostgreSQL. Each line is rounded once
(``round_hours``, ``round_money``: half up); totals are sums of rounded lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db import connection, transaction

from queues.models import GpuClass, RateCard, RateCardWeight, SharingMode, Team, TeamCostCenter
from queues.rates import MICROSECONDS_PER_HOUR, round_hours, round_money

# What a statement may be grouped by (the API's group_by), and the column each one reads.
DIMENSIONS = {
    "team": "i.team_id",
    "cost_center": "COALESCE(hw.cost_center, i.cost_center)",
    "gpu_class": "i.gpu_class_id",
    "sharing_mode": "i.sharing_mode",
    "job": "i.job_id",
}
DEFAULT_GROUP_BY = ("team", "cost_center", "gpu_class", "sharing_mode")

SHARING_NOTES = {
    SharingMode.TIME_SLICED: "time-sliced: charged by allocation share (1/replicas per device), "
    "since per-container GPU metrics are not reliable under time-slicing",
    SharingMode.MIG: "MIG slices: charged by each slice's share of the GPU",
    SharingMode.EXCLUSIVE: "",
}


@dataclass(frozen=True)
class Line:
    """One statement line. ``key`` holds the grouped dimensions (names, not ids); normalized
    hours and cost are None for use no rate card rated (``currency`` is then empty)."""

    key: dict[str, Any]
    currency: str
    device_hours: Decimal
    gpu_hours: Decimal
    normalized_gpu_hours: Decimal | None
    cost: Decimal | None
    versions: tuple[str, ...]
    provisional: bool

    @property
    def note(self) -> str:
        notes = [SHARING_NOTES.get(self.key.get("sharing_mode", ""), "")]
        if self.provisional:
            notes.append("provisional: some GPUs are still held")
        if self.cost is None:
            notes.append("not rated: no rate card weighs this class then")
        return "; ".join(n for n in notes if n)


@dataclass(frozen=True)
class Totals:
    device_hours: Decimal
    gpu_hours: Decimal
    normalized_gpu_hours: Decimal
    cost: dict[str, Decimal]  # by currency

    @classmethod
    def of(cls, lines: Iterable[Line]) -> Totals:
        lines = list(lines)
        cost: dict[str, Decimal] = {}
        for line in lines:
            if line.cost is not None:
                cost[line.currency] = cost.get(line.currency, Decimal("0.00")) + line.cost
        return cls(
            device_hours=sum((line.device_hours for line in lines), Decimal("0.000")),
            gpu_hours=sum((line.gpu_hours for line in lines), Decimal("0.000")),
            normalized_gpu_hours=sum(
                (line.normalized_gpu_hours or Decimal(0) for line in lines), Decimal("0.000")
            ),
            cost=cost,
        )


@dataclass(frozen=True)
class Statement:
    start: datetime
    end: datetime
    now: datetime
    group_by: tuple[str, ...]
    lines: list[Line]
    totals: Totals = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "totals", Totals.of(self.lines))

    @property
    def provisional(self) -> bool:
        return any(line.provisional for line in self.lines)


@dataclass
class _Sum:
    device: Fraction = Fraction(0)
    gpu: Fraction = Fraction(0)
    normalized: Fraction = Fraction(0)
    cost: Fraction = Fraction(0)
    versions: set[str] = field(default_factory=set)
    provisional: bool = False


def statement(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    group_by: Sequence[str] = DEFAULT_GROUP_BY,
    team_ids: Iterable[int] | None = None,
    job_ids: Iterable[int] | None = None,
    job_states: Sequence[str] | None = None,
) -> Statement:
    """The usage held in [``start``, ``end``) rated and grouped by ``group_by`` (keys of
    DIMENSIONS), open intervals counted until ``now``; only ``team_ids``' (or ``job_ids``')
    usage when given; only usage of jobs now in ``job_states`` when given. Lines are ordered by
    their key."""
    unknown = [g for g in group_by if g not in DIMENSIONS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)}")
    group_by = tuple(dict.fromkeys(group_by))
    rows = _grouped_rows(
        start=start,
        end=end,
        now=now,
        group_by=group_by,
        team_ids=team_ids,
        job_ids=job_ids,
        job_states=job_states,
    )
    cards = {c.pk: c for c in RateCard.objects.all()}
    weights = {
        (w.rate_card_id, w.gpu_class_id): w.weight
        for w in RateCardWeight.objects.filter(rate_card__in=cards)
    }
    sums: dict[tuple[Any, ...], _Sum] = {}
    for row in rows:
        *dims, class_id, card_id, denominator, device_us, gpu_us, still_open = row
        card = cards.get(card_id) if card_id is not None else None
        weight = weights.get((card_id, class_id)) if card is not None else None
        currency = card.currency if card is not None and weight is not None else ""
        acc = sums.setdefault((*dims, currency), _Sum())
        acc.device += Fraction(int(device_us), MICROSECONDS_PER_HOUR)
        gpu = Fraction(int(gpu_us), MICROSECONDS_PER_HOUR * int(denominator))
        acc.gpu += gpu
        if card is not None and weight is not None:
            normalized = gpu * Fraction(weight)
            acc.normalized += normalized
            acc.cost += normalized * Fraction(card.price_per_normalized_gpu_hour)
            acc.versions.add(card.version)
        acc.provisional = acc.provisional or bool(still_open)
    names = _names(group_by, sums)
    lines = []
    for key, acc in sums.items():
        *dims, currency = key
        rated = bool(currency)
        lines.append(
            Line(
                key={
                    g: names[g].get(v, v) if g in names else v
                    for g, v in zip(group_by, dims, strict=True)
                },
                currency=currency,
                device_hours=round_hours(acc.device),
                gpu_hours=round_hours(acc.gpu),
                normalized_gpu_hours=round_hours(acc.normalized) if rated else None,
                cost=round_money(acc.cost) if rated else None,
                versions=tuple(sorted(acc.versions)),
                provisional=acc.provisional,
            )
        )
    lines.sort(key=lambda line: (tuple(str(line.key[g]) for g in group_by), line.currency))
    return Statement(start=start, end=end, now=now, group_by=group_by, lines=lines)


def _names(group_by: Sequence[str], sums: dict[tuple[Any, ...], _Sum]) -> dict[str, dict]:
    """Ids → names for the team and GPU class dimensions (one query each)."""
    names: dict[str, dict] = {}
    for dim, model in (("team", Team), ("gpu_class", GpuClass)):
        if dim in group_by:
            index = list(group_by).index(dim)
            ids = {key[index] for key in sums}
            names[dim] = dict(model.objects.filter(pk__in=ids).values_list("pk", "name"))
    return names


def _grouped_rows(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    group_by: Sequence[str],
    team_ids: Iterable[int] | None,
    job_ids: Iterable[int] | None,
    job_states: Sequence[str] | None = None,
) -> list[tuple[Any, ...]]:
    """One row per (group, GPU class, rate card, share denominator): the dimensions, the class
    id, the card id (None before the first card), the denominator, Σ microseconds × devices and
    Σ microseconds × devices × share numerator, and whether any interval is still open."""
    teams = None if team_ids is None else list(team_ids)
    jobs = None if job_ids is None else list(job_ids)
    cards, centers = _windows(start=start, end=end, team_ids=teams)
    sql = statement_sql(
        vendor=connection.vendor,
        group_by=group_by,
        cards=len(cards),
        centers=len(centers),
        teams=None if teams is None else len(teams),
        jobs=None if jobs is None else len(jobs),
        states=None if job_states is None else len(job_states),
    )
    params: dict[str, Any] = {"ws": _db_time(start), "we": _db_time(end), "now": _db_time(now)}
    for n, (card_id, lo, hi) in enumerate(cards):
        params.update({f"c{n}": card_id, f"c{n}f": _db_time(lo), f"c{n}t": _db_time(hi)})
    for n, (team, center, lo, hi) in enumerate(centers):
        params.update(
            {f"h{n}": team, f"h{n}c": center, f"h{n}f": _db_time(lo), f"h{n}t": _db_time(hi)}
        )
    params.update({f"team_{n}": team for n, team in enumerate(teams or [])})
    params.update({f"job_{n}": job for n, job in enumerate(jobs or [])})
    params.update({f"state_{n}": state for n, state in enumerate(job_states or [])})
    if connection.vendor != "postgresql":
        # (No transaction: on SQLite the portal's transactions are IMMEDIATE, a write lock.)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner cannot know that a few hundred groups come out of millions of rows and
        # sorts them (spilling to disk); hashing them is a third faster. For this query only:
        # SET LOCAL ends with the transaction, and is undone right after.
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(sql, params)
        rows = list(cursor.fetchall())
        cursor.execute("SET LOCAL enable_sort = on")
        return rows


def _db_time(value: datetime) -> Any:
    """A datetime as a raw query parameter: SQLite compares the text Django stores."""
    if connection.vendor == "sqlite":
        return connection.ops.adapt_datetimefield_value(value)
    return value


def extremes(vendor: str) -> tuple[str, str]:
    """The many-argument GREATEST and LEAST of ``vendor``."""
    return ("GREATEST", "LEAST") if vendor == "postgresql" else ("MAX", "MIN")


def microseconds_sql(vendor: str, start: str, end: str) -> str:
    """Whole microseconds from ``start`` to ``end`` (column expressions), exactly."""
    if vendor == "postgresql":
        # date_part is double precision: exact to well under a microsecond for any hold
        # shorter than a century, so rounding gives the exact count, and it is much faster
        # than EXTRACT's numeric.
        return f"ROUND(date_part('epoch', {end} - {start}) * 1000000)::bigint"
    # SQLite stores the text 'YYYY-MM-DD HH:MM:SS[.ffffff]': whole seconds from the text without
    # its fraction (strftime would round it), then the microseconds. Exact, and no Python
    # function is called per row.
    return (
        f"((strftime('%%s', substr({end}, 1, 19)) - strftime('%%s', substr({start}, 1, 19)))"
        f" * 1000000 + CAST(substr({end}, 21) AS INTEGER)"
        f" - CAST(substr({start}, 21) AS INTEGER))"
    )


def _windows(
    *, start: datetime, end: datetime, team_ids: list[int] | None
) -> tuple[
    list[tuple[int | None, datetime, datetime]], list[tuple[int, str | None, datetime, datetime]]
]:
    """The validity windows inside [``start``, ``end``) of the rate cards (before the first
    card: None) and of each team's cost centers (before a team's first history row: None, the
    interval's own cost center holds). Few rows: cards and cost-center changes are rare."""
    froms = list(RateCard.objects.order_by("effective_from").values_list("pk", "effective_from"))
    cards: list[tuple[int | None, datetime, datetime]] = []
    bounds = [(None, start), *froms]
    for n, (card_id, lo) in enumerate(bounds):
        hi = bounds[n + 1][1] if n + 1 < len(bounds) else end
        lo, hi = max(lo, start), min(hi, end)
        if hi > lo:
            cards.append((card_id, lo, hi))
    history: dict[int, list[tuple[str | None, datetime]]] = {}
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)
    for team_id in teams.values_list("pk", flat=True):
        history[team_id] = [(None, start)]
    rows = TeamCostCenter.objects.filter(team_id__in=list(history)).order_by("effective_from")
    for team_id, named, at in rows.values_list("team_id", "cost_center", "effective_from"):
        history[team_id].append((named, at))
    centers: list[tuple[int, str | None, datetime, datetime]] = []
    for team_id, changes in history.items():
        for n, (center, lo) in enumerate(changes):
            hi = changes[n + 1][1] if n + 1 < len(changes) else end
            lo, hi = max(lo, start), min(hi, end)
            if hi > lo:
                centers.append((team_id, center, lo, hi))
    return cards, centers


def statement_sql(
    *,
    vendor: str,
    group_by: Sequence[str],
    cards: int = 1,
    centers: int = 1,
    teams: int | None = None,
    jobs: int | None = None,
    states: int | None = None,
) -> str:
    """The statement query for ``vendor`` ("postgresql" or "sqlite"), with named parameters
    ``ws`` and ``we`` (the window), ``now``; ``cards`` rate-card windows (``c0``, ``c0f``,
    ``c0t``: card id or NULL, from, to) and ``centers`` cost-center windows (``h0``, ``h0c``,
    ``h0f``, ``h0t``: team, cost center or NULL, from, to); and ``team_0``… / ``job_0``… /
    ``state_0``… when ``teams`` / ``jobs`` / ``states`` (how many) restrict it.

    The windows are parameters (VALUES), not subqueries of the tables: PostgreSQL then plans a
    parallel scan of the intervals with a hash join to a handful of rows."""
    greatest, least = extremes(vendor)
    micro = microseconds_sql(vendor, "p.ps", "p.pe")
    if vendor == "postgresql":
        still_open, any_open = "i.ended_at IS NULL", "BOOL_OR(p.still_open)"
    else:
        still_open = "CASE WHEN i.ended_at IS NULL THEN 1 ELSE 0 END"
        any_open = "MAX(p.still_open)"
    held_start = f"{greatest}(i.started_at, %(ws)s)"
    held_end = f"{least}(COALESCE(i.ended_at, %(now)s), %(we)s)"
    filters = [
        "i.started_at < %(we)s",
        "i.started_at < %(now)s",
        "(i.ended_at IS NULL OR i.ended_at > %(ws)s)",
    ]
    if teams is not None:
        names = ", ".join(f"%(team_{n})s" for n in range(teams))
        filters.append(f"i.team_id IN ({names})" if teams else "1 = 0")
    if jobs is not None:
        names = ", ".join(f"%(job_{n})s" for n in range(jobs))
        filters.append(f"i.job_id IN ({names})" if jobs else "1 = 0")
    if states is not None:
        names = ", ".join(f"%(state_{n})s" for n in range(states))
        filters.append(f"i.job_id IN (SELECT id FROM queues_job WHERE state IN ({names}))")
    dims = "".join(f"{DIMENSIONS[g]} AS d_{g}, " for g in group_by)
    group = ", ".join([*(f"p.d_{g}" for g in group_by), "p.gpu_class_id", "p.card_id"])
    if vendor == "postgresql":
        card_row = "(%(c{n})s::bigint, %(c{n}f)s::timestamptz, %(c{n}t)s::timestamptz)"
        center_row = (
            "(%(h{n})s::bigint, %(h{n}c)s::varchar, %(h{n}f)s::timestamptz, %(h{n}t)s::timestamptz)"
        )
    else:
        card_row = "(%(c{n})s, %(c{n}f)s, %(c{n}t)s)"
        center_row = "(%(h{n})s, %(h{n}c)s, %(h{n}f)s, %(h{n}t)s)"
    # No window at all (an empty selection): one empty window keeps the query valid.
    null_id = "NULL::bigint" if vendor == "postgresql" else "NULL"
    null_text = "NULL::varchar" if vendor == "postgresql" else "NULL"
    card_values = ", ".join(card_row.format(n=n) for n in range(cards)) or (
        f"({null_id}, %(ws)s, %(ws)s)"
    )
    center_values = ", ".join(center_row.format(n=n) for n in range(centers)) or (
        f"({null_id}, {null_text}, %(ws)s, %(ws)s)"
    )
    return f"""
        WITH cw(card_id, cf, ct) AS (VALUES {card_values}),
        hw(team_id, cost_center, hf, ht) AS (VALUES {center_values})
        SELECT {group}, p.share_denominator,
               SUM({micro} * p.devices),
               SUM({micro} * p.devices * p.share_numerator),
               {any_open}
        FROM (
            SELECT {dims}i.gpu_class_id, cw.card_id, i.share_denominator, i.share_numerator,
                   i.devices, {still_open} AS still_open,
                   {greatest}({held_start}, cw.cf, hw.hf) AS ps,
                   {least}({held_end}, cw.ct, hw.ht) AS pe
            FROM queues_usageinterval i
            JOIN cw ON cw.cf < {held_end} AND cw.ct > {held_start}
            JOIN hw ON hw.team_id = i.team_id AND hw.hf < {held_end} AND hw.ht > {held_start}
            WHERE {" AND ".join(filters)}
        ) p
        WHERE p.pe > p.ps
        GROUP BY {group}, p.share_denominator
    """
