"""The cache the login lock-outs and API rate limits count in, when it is Redis.

Redis is the broker's, not the source of truth: a Redis that is down or restarting must not turn
every request into an error. Reads then miss and writes are dropped (logged once a minute at
most), so the limits go uncounted while it is away and requests go on; the database still
holds everything submitted, and the reconcile catches up when the broker is back."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache.backends.redis import RedisCache
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
