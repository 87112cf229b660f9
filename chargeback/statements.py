"""Statements: usage intervals rated in the database, by the rule of ``queues.rates``.

The database does what grows with the number of intervals, in one pass with no join: it clips
each interval to the report window and finds which piece of the window (cut at every rate-card
and cost-center change inside it) the interval begins and ends in, then sums whole
device-microseconds per group. What it returns is exact integers for a handful of groups; Python
splits them over the pieces (each with one card and, per team, one cost center) and turns them
into GPU-hours and money with Fractions, so the result is exactly what
``queues.rates.rate_interval`` gives interval by interval, on SQLite as on PostgreSQL. Each line
is rounded once (``round_hours``, ``round_money``: half up); totals are sums of rounded lines.
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
    group_by = tuple(dict.fromkeys(group_by))
    sums = exact_sums(
        start=start,
        end=end,
        now=now,
        group_by=group_by,
        team_ids=team_ids,
        job_ids=job_ids,
        job_states=job_states,
    )
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


def exact_sums(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    group_by: Sequence[str],
    team_ids: Iterable[int] | None = None,
    job_ids: Iterable[int] | None = None,
    job_states: Sequence[str] | None = None,
) -> dict[tuple[Any, ...], _Sum]:
    """Exact, unrounded sums by (the ``group_by`` values — ids for team, GPU class and job —,
    currency): what ``statement`` rounds into lines.

    The window [``start``, ``end``) is cut at every rate-card change and every cost-center
    change inside it; within each piece one card and, per team, one cost center hold. The
    database sums, per group and per (first piece, last piece) an interval touches, the devices
    held, the device-microseconds in its first piece and those in its last; the pieces between
    are whole, so their share is the piece's length × the devices. Python turns these integers
    into hours and money with Fractions."""
    unknown = [g for g in group_by if g not in DIMENSIONS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)}")
    teams = None if team_ids is None else list(team_ids)
    jobs = None if job_ids is None else list(job_ids)
    pieces = _Pieces.of(start=start, end=end, team_ids=teams)
    columns = _key_columns(group_by)
    sql = statement_sql(
        vendor=connection.vendor,
        keys=[column for _, column in columns],
        boundaries=len(pieces.boundaries),
        teams=None if teams is None else len(teams),
        jobs=None if jobs is None else len(jobs),
        states=None if job_states is None else len(job_states),
    )
    params: dict[str, Any] = {"ws": _db_time(start), "we": _db_time(end), "now": _db_time(now)}
    params.update({f"b{n}": _db_time(b) for n, b in enumerate(pieces.boundaries)})
    params.update({f"team_{n}": team for n, team in enumerate(teams or [])})
    params.update({f"job_{n}": job for n, job in enumerate(jobs or [])})
    params.update({f"state_{n}": state for n, state in enumerate(job_states or [])})
    cards = {c.pk: c for c in RateCard.objects.all()}
    weights = {
        (w.rate_card_id, w.gpu_class_id): w.weight
        for w in RateCardWeight.objects.filter(rate_card__in=cards)
    }
    sums: dict[tuple[Any, ...], _Sum] = {}
    for row in _fetch(sql, params):
        values = dict(zip((name for name, _ in columns), row, strict=False))
        class_id, numerator, denominator, first, last, devices, head, tail, still_open = row[
            len(columns) :
        ]
        share = Fraction(int(numerator), int(denominator))
        for piece, device_us in pieces.split(int(first), int(last), int(devices), head, tail):
            card_id = pieces.cards[piece]
            card = cards.get(card_id) if card_id is not None else None
            weight = weights.get((card_id, class_id)) if card is not None else None
            currency = card.currency if card is not None and weight is not None else ""
            dims = []
            for g in group_by:
                if g == "cost_center":
                    center = pieces.cost_center(values["cc_team"], piece)
                    dims.append(values["cc_own"] if center is None else center)
                else:
                    dims.append(values[g])
            acc = sums.setdefault((*dims, currency), _Sum())
            device = Fraction(device_us, MICROSECONDS_PER_HOUR)
            acc.device += device
            gpu = device * share
            acc.gpu += gpu
            if card is not None and weight is not None:
                normalized = gpu * Fraction(weight)
                acc.normalized += normalized
                acc.cost += normalized * Fraction(card.price_per_normalized_gpu_hour)
                acc.versions.add(card.version)
            acc.provisional = acc.provisional or bool(still_open)
    return sums


def _key_columns(group_by: Sequence[str]) -> list[tuple[str, str]]:
    """(name, column) of what the query groups by besides the class and share: each dimension's
    column; for the cost center, the team and the interval's own cost center (the team's history
    decides, piece by piece, in Python)."""
    columns: list[tuple[str, str]] = []
    for g in group_by:
        if g == "cost_center":
            columns += [("cc_team", "i.team_id"), ("cc_own", "i.cost_center")]
        else:
            columns.append((g, DIMENSIONS[g]))
    return columns


@dataclass(frozen=True)
class _Pieces:
    """The report window cut at every rate-card and cost-center change inside it: piece ``n``
    runs from ``edges[n]`` to ``edges[n + 1]``; ``cards[n]`` is the card in force in it (None
    before the first card) and ``centers[team][n]`` the team's cost center (None before its
    first history row: the interval's own cost center holds)."""

    edges: tuple[datetime, ...]
    cards: tuple[int | None, ...]
    centers: dict[int, tuple[str | None, ...]]

    @property
    def boundaries(self) -> tuple[datetime, ...]:
        return self.edges[1:-1]

    @classmethod
    def of(cls, *, start: datetime, end: datetime, team_ids: list[int] | None) -> _Pieces:
        cards = list(
            RateCard.objects.order_by("effective_from").values_list("effective_from", "pk")
        )
        teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=team_ids)
        history: dict[int, list[tuple[datetime, str | None]]] = {
            team_id: [] for team_id in teams.values_list("pk", flat=True)
        }
        rows = TeamCostCenter.objects.filter(team_id__in=list(history)).order_by("effective_from")
        for team_id, at, named in rows.values_list("team_id", "effective_from", "cost_center"):
            history[team_id].append((at, named))
        changes = {at for at, _ in cards} | {at for h in history.values() for at, _ in h}
        edges = (start, *sorted(at for at in changes if start < at < end), end)

        def in_force(timeline: list[tuple[datetime, Any]], at: datetime) -> Any:
            current = None
            for since, value in timeline:
                if since > at:
                    break
                current = value
            return current

        return cls(
            edges=edges,
            cards=tuple(in_force(cards, lo) for lo in edges[:-1]),
            centers={
                team_id: tuple(in_force(h, lo) for lo in edges[:-1])
                for team_id, h in history.items()
                if h
            },
        )

    def cost_center(self, team_id: int, piece: int) -> str | None:
        centers = self.centers.get(team_id)
        return None if centers is None else centers[piece]

    def split(
        self, first: int, last: int, devices: int, head: Any, tail: Any
    ) -> Iterable[tuple[int, int]]:
        """(piece, device-microseconds) of a group of intervals that begin in piece ``first``
        and end in piece ``last``: ``head`` in the first, ``tail`` in the last, whole pieces
        between."""
        yield first, int(head)
        for piece in range(first + 1, last):
            length = self.edges[piece + 1] - self.edges[piece]
            us = (length.days * 86400 + length.seconds) * 1_000_000 + length.microseconds
            yield piece, us * devices
        if last != first:
            yield last, int(tail)


def _names(group_by: Sequence[str], sums: dict[tuple[Any, ...], _Sum]) -> dict[str, dict]:
    """Ids → names for the team and GPU class dimensions (one query each)."""
    names: dict[str, dict] = {}
    for dim, model in (("team", Team), ("gpu_class", GpuClass)):
        if dim in group_by:
            index = list(group_by).index(dim)
            ids = {key[index] for key in sums}
            names[dim] = dict(model.objects.filter(pk__in=ids).values_list("pk", "name"))
    return names


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
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


def statement_sql(
    *,
    vendor: str,
    keys: Sequence[str],
    boundaries: int = 0,
    teams: int | None = None,
    jobs: int | None = None,
    states: int | None = None,
) -> str:
    """The statement query for ``vendor`` ("postgresql" or "sqlite"), grouped by the ``keys``
    (column expressions over the intervals ``i``), with named parameters ``ws`` and ``we`` (the
    window), ``now``, ``b0``… (``boundaries`` instants where the window is cut, in order), and
    ``team_0``… / ``job_0``… / ``state_0``… when ``teams`` / ``jobs`` / ``states`` (how many)
    restrict it.

    Per row it clips the interval to the window and finds the pieces its start and end fall in
    (comparisons with a handful of parameters, no join); nearly every interval begins and ends
    in the same piece, and then its sum is just its length × devices."""
    greatest, least = extremes(vendor)
    cast = "::timestamptz" if vendor == "postgresql" else ""
    if vendor == "postgresql":
        still_open, any_open = "i.ended_at IS NULL", "BOOL_OR(p.still_open)"
    else:
        still_open = "CASE WHEN i.ended_at IS NULL THEN 1 ELSE 0 END"
        any_open = "MAX(p.still_open)"
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
    bs = [f"%(b{n})s{cast}" for n in range(boundaries)]
    if bs:
        # The piece of an instant: how many cuts lie at or before it (for an end: before it).
        first = " + ".join(f"CASE WHEN p.ps >= {b} THEN 1 ELSE 0 END" for b in bs)
        last = " + ".join(f"CASE WHEN p.pe > {b} THEN 1 ELSE 0 END" for b in bs)
        next_cut = "CASE " + " ".join(f"WHEN p.ps < {b} THEN {b}" for b in bs)
        next_cut += f" ELSE %(we)s{cast} END"
        last_cut = "CASE " + " ".join(f"WHEN p.pe > {b} THEN {b}" for b in reversed(bs))
        last_cut += f" ELSE %(ws)s{cast} END"
        head = microseconds_sql(vendor, "p.ps", f"{least}(p.pe, {next_cut})")
        tail = (
            f"CASE WHEN ({first}) = ({last}) THEN 0 "
            f"ELSE {microseconds_sql(vendor, last_cut, 'p.pe')} END"
        )
    else:
        first = last = "0"
        head, tail = microseconds_sql(vendor, "p.ps", "p.pe"), "0"
    selected = "".join(f"{column} AS k{n}, " for n, column in enumerate(keys))
    group = ", ".join(
        [
            *(f"q.k{n}" for n in range(len(keys))),
            *("q.gpu_class_id", "q.share_numerator", "q.share_denominator"),
            *("q.first_piece", "q.last_piece"),
        ]
    )
    return f"""
        SELECT {group},
               SUM(q.devices), SUM(q.head * q.devices), SUM(q.tail * q.devices),
               {any_open.replace("p.", "q.")}
        FROM (
            SELECT p.*, {first} AS first_piece, {last} AS last_piece,
                   {head} AS head, {tail} AS tail
            FROM (
                SELECT {selected}i.gpu_class_id, i.share_numerator, i.share_denominator,
                       i.devices, {still_open} AS still_open,
                       {greatest}(i.started_at, %(ws)s) AS ps,
                       {least}(COALESCE(i.ended_at, %(now)s), %(we)s) AS pe
                FROM queues_usageinterval i
                WHERE {" AND ".join(filters)}
            ) p
            WHERE p.pe > p.ps
        ) q
        GROUP BY {group}
    """
