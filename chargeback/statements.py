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

import functools
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
    "cost_center": "i.cost_center",  # and the team's history, piece by piece
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
    DIMENSIONS) as of ``now``: intervals still open then (or reported ended later) counted
    until ``now``, nothing after it; only ``team_ids``' (or ``job_ids``')
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
    database sums, per group, the device-microseconds held in each piece (whole integers);
    Python rates each piece with its card and turns the sums into hours and money with
    Fractions."""
    unknown = [g for g in group_by if g not in DIMENSIONS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)}")
    teams = None if team_ids is None else list(team_ids)
    jobs = None if job_ids is None else list(job_ids)
    pieces = _Pieces.of(start=start, end=end, team_ids=teams)
    columns = _key_columns(group_by)
    keys = list(dict.fromkeys(columns.values()))
    restrict = functools.partial(
        statement_sql,
        vendor=connection.vendor,
        keys=keys,
        teams=None if teams is None else len(teams),
        jobs=None if jobs is None else len(jobs),
        states=None if job_states is None else len(job_states),
    )
    sql, open_sql = restrict(pieces=len(pieces.edges) - 1), restrict(still_open=True)
    params: dict[str, Any] = {"ws": _db_time(start), "we": _db_time(end), "now": _db_time(now)}
    params.update({f"c{n}": _db_time(cut) for n, cut in enumerate(pieces.edges[1:-1])})
    params.update({f"team_{n}": team for n, team in enumerate(teams or [])})
    params.update({f"job_{n}": job for n, job in enumerate(jobs or [])})
    params.update({f"state_{n}": state for n, state in enumerate(job_states or [])})
    cards = {c.pk: c for c in RateCard.objects.all()}
    weights = {
        (w.rate_card_id, w.gpu_class_id): w.weight
        for w in RateCardWeight.objects.filter(rate_card__in=cards)
    }
    sums: dict[tuple[Any, ...], _Sum] = {}
    rows = _fetch(sql, params)
    with connection.cursor() as cursor:
        cursor.execute(open_sql, params)
        still_open = {tuple(row) for row in cursor.fetchall()}
    for row in rows:
        values = {name: row[keys.index(column)] for name, column in columns.items()}
        held, *before_cuts = (int(us or 0) for us in row[len(keys) :])
        before = [0, *before_cuts, held]
        by_piece = [before[n + 1] - before[n] for n in range(len(before) - 1)]
        if not any(by_piece):
            continue
        class_id = values["class"]
        share = Fraction(int(values["numerator"]), int(values["denominator"]))
        for piece, device_us in enumerate(by_piece):
            if not device_us and len(by_piece) > 1:
                continue
            card_id = pieces.cards[piece]
            card = cards.get(card_id) if card_id is not None else None
            weight = weights.get((card.pk, class_id)) if card is not None else None
            currency = card.currency if card is not None and weight is not None else ""
            dims = []
            for g in group_by:
                if g == "cost_center":
                    center = pieces.cost_center(values["cc_team"], piece)
                    dims.append(values["cc_own"] if center is None else center)
                else:
                    dims.append(values[g])
            acc = sums.setdefault((*dims, currency), _Sum())
            device = Fraction(int(device_us), MICROSECONDS_PER_HOUR)
            acc.device += device
            gpu = device * share
            acc.gpu += gpu
            if card is not None and weight is not None:
                normalized = gpu * Fraction(weight)
                acc.normalized += normalized
                acc.cost += normalized * Fraction(card.price_per_normalized_gpu_hour)
                acc.versions.add(card.version)
            acc.provisional = acc.provisional or tuple(row[: len(keys)]) in still_open
    return sums


def _key_columns(group_by: Sequence[str]) -> dict[str, str]:
    """What the query groups by, by name: each dimension's column (for the cost center, the
    team and the interval's own cost center: the team's history decides, piece by piece, in
    Python), the class and the share."""
    columns: dict[str, str] = {}
    for g in group_by:
        if g == "cost_center":
            columns |= {"cc_team": "i.team_id", "cc_own": "i.cost_center"}
        else:
            columns[g] = DIMENSIONS[g]
    return columns | {
        "class": "i.gpu_class_id",
        "numerator": "i.share_numerator",
        "denominator": "i.share_denominator",
    }


@dataclass(frozen=True)
class _Pieces:
    """The report window cut at every rate-card and cost-center change inside it: piece ``n``
    runs from ``edges[n]`` to ``edges[n + 1]``; ``cards[n]`` is the card in force in it (None
    before the first card) and ``centers[team][n]`` the team's cost center (None before its
    first history row: the interval's own cost center holds)."""

    edges: tuple[datetime, ...]
    cards: tuple[int | None, ...]
    centers: dict[int, tuple[str | None, ...]]

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
        cursor.execute("SET LOCAL jit = off")
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
        # shorter than a century, so rounding (the cast to bigint rounds) gives the exact
        # count, and it is much faster than EXTRACT's numeric.
        return f"(date_part('epoch', {end} - {start}) * 1000000)::bigint"
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
    pieces: int = 1,
    teams: int | None = None,
    jobs: int | None = None,
    states: int | None = None,
    still_open: bool = False,
) -> str:
    """The statement query for ``vendor`` ("postgresql" or "sqlite"), grouped by the ``keys``
    (columns of the intervals ``i``), with named parameters ``ws`` and ``we`` (the window),
    ``now``, ``c0``… (the ``pieces - 1`` cuts between the window's pieces, in order), and
    ``team_0``… / ``job_0``… / ``state_0``… when ``teams`` / ``jobs`` / ``states`` (how many)
    restrict it. Its columns: the keys, Σ device-microseconds
    held in the window, then for each inner edge Σ device-microseconds held before it (NULL for
    none; intervals that held nothing in the window add zeros).
    With ``still_open``: only the keys of the groups where an interval still open held GPUs in
    the window (few rows, found by the index on ``ended_at``).

    One pass with no join, grouped by plain columns (so PostgreSQL aggregates in parallel):
    each interval is clipped to the window, and its length and its part before each cut are
    summed as whole microseconds × its devices."""
    greatest, least = extremes(vendor)
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
    held_start = f"{greatest}(i.started_at, %(ws)s)"
    # Nothing after ``now`` (the statement's as-of instant) counts, even where the interval
    # was reported ended later: a statement as of an instant is reproducible.
    held_until = f"{least}(COALESCE(i.ended_at, %(now)s), %(now)s)"
    held_end = f"{least}({held_until}, %(we)s)"
    if still_open:
        filters += ["(i.ended_at IS NULL OR i.ended_at > %(now)s)", f"{held_end} > {held_start}"]
        return f"""
            SELECT DISTINCT {", ".join(keys)} FROM queues_usageinterval i
            WHERE {" AND ".join(filters)}
        """
    cut = "%(c{n})s::timestamptz" if vendor == "postgresql" else "%(c{n})s"
    # Σ held, then for each cut Σ held before it by the intervals that begin before it: a
    # piece's part is the difference of two of these. Each expression is written once per sum
    # (the database evaluates it per reference), and most intervals skip most filters.
    sums = [f"SUM({microseconds_sql(vendor, held_start, held_end)} * i.devices)"]
    for n in range(pieces - 1):
        # (A cut lies inside the window: the window's own edges need no clipping here.)
        before = f"{least}({held_until}, {cut.format(n=n)})"
        sums.append(
            f"SUM({microseconds_sql(vendor, held_start, before)} * i.devices)"
            f" FILTER (WHERE i.started_at < {cut.format(n=n)})"
        )
    columns = ", ".join(keys)
    return f"""
        SELECT {columns}, {", ".join(sums)}
        FROM queues_usageinterval i
        WHERE {" AND ".join(filters)} AND {held_end} > {held_start}
        GROUP BY {columns}
    """
