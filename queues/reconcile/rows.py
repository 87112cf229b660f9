"""Many rows updated in one statement on PostgreSQL: the values go as one JSON parameter that
``jsonb_to_recordset`` turns back into typed columns, and the statement returns the rows it
changed. A cycle under churn writes hundreds of rows of the same kind at once (jobs that
started, usage intervals that ended, waiting jobs' reasons); a statement per row, or Django's
``bulk_update`` with a CASE per row and field, cost most of those steps.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, models


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
