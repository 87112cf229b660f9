"""API rates per user, counted in the shared cache; a cache that is down lets requests through.

A rate of N per period is counted in fixed windows of that period (N/min: each minute of the
clock): every request adds one to its window's counter with one atomic ``incr``, and the
(N+1)th of a window is refused until the window ends, whatever the number of web workers and
threads answering at once. (DRF's own throttle keeps a list of times, read then written: six
threads got 653 answers through a 600/min limit.) A refused request counts too, so a client that
keeps hammering stays refused until the window ends; ``Retry-After`` says when that is.

The database stays the source of truth and the cache only counts: when Redis is stopped (or the
cache table unreadable), requests are answered without being counted rather than failing, and a
warning is logged."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.cache import caches
from django.db import DatabaseError
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

logger = logging.getLogger(__name__)

# What a cache backend raises when its store is unreachable.
CACHE_DOWN = (RedisError, DatabaseError, OSError)


class PortalUserRateThrottle(UserRateThrottle):
    """The per-user rate (``API_THROTTLE_USER``), counted atomically in fixed windows (the
    module's docstring), open while the cache is down."""

    num_requests: int  # set by DRF from the rate ("600/min": 600 and 60)
    duration: int
    window_ends = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        try:
            return self._count() <= self.num_requests
        except CACHE_DOWN as exc:
            logger.warning("API rate not counted, the cache is unreachable: %s", exc)
            return True

    def _count(self) -> int:
        """This request's number in its window (the window's counter after adding one)."""
        cache = caches["default"]  # read now: tests and settings may swap the cache
        now = self.timer()
        window = int(now // self.duration)
        self.window_ends = (window + 1) * self.duration
        key = f"{self.key}:{window}"
        # Kept past the window's end, so it never expires between the add and the incr.
        cache.add(key, 0, timeout=2 * self.duration + 1)
        try:
            return int(cache.incr(key))
        except ValueError:  # gone meanwhile (flushed): this request starts the window again
            cache.add(key, 1, timeout=2 * self.duration + 1)
            return 1

    def wait(self) -> float | None:
        return max(self.window_ends - self.timer(), 0.0)


class PreviewRateThrottle(PortalUserRateThrottle):
    """Previews per user (``API_THROTTLE_PREVIEW``), on top of the user's rate for everything:
    each simulates the whole cluster."""

    scope = "preview"


def preview_wait(request: Any) -> int | None:
    """Seconds a signed-in user must wait before the next preview or what-if on a page (the API's
    preview rate, counted together with the API's previews), or None if it may go ahead now."""
    throttle = PreviewRateThrottle()
    if throttle.allow_request(request, None):
        return None
    return max(1, math.ceil(throttle.wait() or 1))
