"""The cache the login lock-outs and API rate limits count in.

Counts go up with ``incr``, which must be atomic: several web workers answer one user at once.
Redis' INCR is; Django's database cache reads then writes, so ``AtomicDatabaseCache`` does it
under a row lock instead.

When it is Redis: Redis is the broker's, not the source of truth: a Redis that is down or
restarting must not turn every request into an error. Reads then miss and writes are dropped
(logged once a minute at most), so the limits go uncounted while it is away and requests go on;
the database still holds everything submitted, and the reconcile catches up when the broker is
back."""

from __future__ import annotations

import base64
import logging
import pickle
import time
from typing import Any

from django.core.cache.backends.db import DatabaseCache
from django.core.cache.backends.redis import RedisCache
from django.db import connections, router, transaction
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)
_WARN_EVERY_SECONDS = 60.0
_last_warning = 0.0


def _unavailable(operation: str, exc: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= _WARN_EVERY_SECONDS:
        _last_warning = now
        logger.warning("cache unavailable (%s): %s; limits go uncounted meanwhile", operation, exc)


class TolerantRedisCache(RedisCache):
    """Django's Redis cache, with Redis errors answered as a miss (reads) or a no-op (writes)."""

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except RedisError as exc:
            _unavailable("get", exc)
            return default

    def get_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        try:
            return super().get_many(keys, version)
        except RedisError as exc:
            _unavailable("get_many", exc)
            return {}

    def set(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except RedisError as exc:
            _unavailable("set", exc)

    def add(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> bool:
        try:
            return super().add(key, value, timeout, version)
        except RedisError as exc:
            _unavailable("add", exc)
            return False

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        try:
            return super().incr(key, delta, version)
        except RedisError as exc:
            _unavailable("incr", exc)
            return delta

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except RedisError as exc:
            _unavailable("delete", exc)
            return False

    def touch(self, key: Any, timeout: Any = None, version: int | None = None) -> bool:
        try:
            return super().touch(key, timeout, version)
        except RedisError as exc:
            _unavailable("touch", exc)
            return False


class AtomicDatabaseCache(DatabaseCache):
    """Django's database cache with an atomic ``incr``: the row is read and written in one
    transaction holding its lock (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's transactions
    take the write lock up front in the portal's settings), so two workers never both read 5
    and write 6."""

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        key = self.make_and_validate_key(key, version)
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        table = connection.ops.quote_name(self._table)  # type: ignore[attr-defined]
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with transaction.atomic(using=database), connection.cursor() as cursor:
            cursor.execute(f"SELECT value FROM {table} WHERE cache_key = %s{lock}", [key])
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key '{key}' not found")
            value = pickle.loads(base64.b64decode(row[0].encode())) + delta
            encoded = base64.b64encode(pickle.dumps(value, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET value = %s WHERE cache_key = %s", [encoded, key])
        return int(value)
