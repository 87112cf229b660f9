"""Rows read and written many at a time, on PostgreSQL.

* ``update_from_rows``: many rows updated in one statement. The values go as one JSON parameter
  that ``jsonb_to_recordset`` turns back into typed columns, and the statement returns the rows
  it changed. A cycle under churn writes hundreds of rows of the same kind at once (jobs that
  started, usage intervals that ended, waiting jobs' reasons); a statement per row, or Django's
  ``bulk_update`` with a CASE per row and field, cost most of those steps.
* ``RowMemo``: the rows of a query a cycle reads every time, read whole only when written since
  the last read. Thousands of waiting jobs, or of usage intervals, are the same as a second ago.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, TypeVar

from django.db import connection, models
from django.db.models.expressions import RawSQL

Row = TypeVar("Row")
# A row's version on PostgreSQL: the transaction that wrote it, and where (every UPDATE writes a
# new version somewhere else, even twice in one transaction).
ROW_VERSION = RawSQL("xmin::text || ctid::text", [])
FETCH_CHUNK = 5000


class RowMemo(Generic[Row]):
    """The rows of one query as this process last read them, by id, each with its version.

    ``read(queryset)`` returns ``make(*row)`` of ``columns`` (the first is ``id``) for every row
    of the queryset. On PostgreSQL it reads every row's version first (two short columns), then
    whole only the rows whose version changed since the last read; what left the query is
    forgotten. Elsewhere, or unless ``keep``, every row is read whole and nothing is kept. One
    memo per query: a process holds it across cycles, and it only ever saves reading what has
    not changed."""

    def __init__(
        self, columns: tuple[str, ...], make: Callable[..., Row], *, keep: bool = True
    ) -> None:
        assert columns[0] == "id", "the first column is the id"
        self.columns = columns
        self.make = make
        self.keep = keep
        self.known: dict[int, tuple[str, Row]] = {}

    def read(self, queryset: models.QuerySet) -> list[Row]:
        if connection.vendor != "postgresql" or not self.keep:
            return [self.make(*row) for row in queryset.values_list(*self.columns)]
        versioned = queryset.annotate(row_version=ROW_VERSION)
        versions = list(versioned.values_list("id", "row_version"))
        known = self.known
        stale = [key for key, version in versions if known.get(key, ("",))[0] != version]
        fresh: dict[int, tuple[str, Row]] = {}
        for start in range(0, len(stale), FETCH_CHUNK):
            for version, *row in versioned.filter(
                id__in=stale[start : start + FETCH_CHUNK]
            ).values_list("row_version", *self.columns):
                fresh[row[0]] = (version, self.make(*row))
        rows: dict[int, tuple[str, Row]] = {}
        for key, version in versions:
            if known.get(key, ("",))[0] == version:
                rows[key] = known[key]
            elif key in fresh:
                # read whole with the version it had then (if it changed after the first read,
                # the next read reads it again); one that left the query in between is gone
                rows[key] = fresh[key]
        self.known = rows
        return [row for _, row in rows.values()]

    def forget(self) -> None:
        self.known = {}


def update_from_rows(
    model: type[models.Model], rows: dict[int, dict[str, Any]], where: dict[str, Any]
) -> set[int]:
    """For each primary key → {field name: value} of ``rows`` (every row the same fields),
    ``UPDATE … SET field = value WHERE pk = key AND`` each of ``where`` (field name → value, None
    for IS NULL), in one statement; the keys of the rows it changed. PostgreSQL only."""
    if not rows:
        return set()
    quote = connection.ops.quote_name
    names = list(next(iter(rows.values())))
    fields = [_column(model, name) for name in names]
    raw = [f.column or f.name for f in fields]
    columns = [quote(c) for c in raw]
    record = ", ".join(
        [
            "pk__ bigint",
            *(f"{c} {f.db_type(connection)}" for c, f in zip(columns, fields, strict=True)),
        ]
    )
    conditions, params = [], []
    for name, value in where.items():
        column = quote(_column(model, name).column or name)
        if value is None:
            conditions.append(f"t.{column} IS NULL")
        else:
            conditions.append(f"t.{column} = %s")
            params.append(value)
    data = [
        {
            "pk__": key,
            **{c: _json_value(f, values[n]) for n, f, c in zip(names, fields, raw, strict=True)},
        }
        for key, values in rows.items()
    ]
    pk = quote(model._meta.pk.column or "id")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(model._meta.db_table)} AS t SET "
            + ", ".join(f"{c} = v.{c}" for c in columns)
            + f" FROM jsonb_to_recordset(%s::jsonb) AS v({record}) WHERE t.{pk} = v.pk__"
            + "".join(f" AND {condition}" for condition in conditions)
            + f" RETURNING t.{pk}",
            [json.dumps(data), *params],
        )
        return {row[0] for row in cursor.fetchall()}


def _column(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a column of {model.__name__}"
    return field


def _json_value(field: models.Field, value: Any) -> Any:
    """``value`` of ``field`` as JSON that ``jsonb_to_recordset`` reads back as the column's."""
    if isinstance(field, models.JSONField) or value is None:
        return value
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()} seconds"
    if isinstance(value, Decimal):
        return str(value)
    return value
