"""Leases: a named row that one holder at a time owns until it expires (one reconcile at a time)."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.utils import timezone

from queues.models import (
    Lease,
)


def lease_acquire(*, name: str, holder: str, ttl: timedelta) -> bool:
    """Take (or renew) the lease ``name`` for ``holder`` for ``ttl``; False if someone else holds
    an unexpired one. One statement decides — insert the lease, or take it over where it has
    expired or is ours — so two takers never both win, on SQLite and PostgreSQL alike. (It runs
    for every submission, whose reconcile requests coalesce on a lease: one round trip, no
    savepoint.)"""
    now = timezone.now()
    ops = connection.ops
    table = ops.quote_name(Lease._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, holder, expires_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
            f"expires_at = excluded.expires_at WHERE {table}.expires_at <= %s "
            f"OR {table}.holder = excluded.holder RETURNING 1",
            [
                name,
                holder,
                ops.adapt_datetimefield_value(now + ttl),
                ops.adapt_datetimefield_value(now),
            ],
        )
        return cursor.fetchone() is not None


def lease_release(*, name: str, holder: str) -> None:
    """Give the lease back early (only if ``holder`` still holds it)."""
    Lease.objects.filter(name=name, holder=holder).update(expires_at=timezone.now())


def lease_held(name: str) -> bool:
    """Whether someone holds the unexpired lease ``name``."""
    return Lease.objects.filter(name=name, expires_at__gt=timezone.now()).exists()
