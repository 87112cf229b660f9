"""API rates per user, counted in the shared cache; a cache that is down lets requests through.

The database stays the source of truth and the cache only counts: when Redis is stopped (or the
cache table unreadable), requests are answered without being counted rather than failing, and a
warning is logged."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.db import DatabaseError
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

logger = logging.getLogger(__name__)

# What a cache backend raises when its store is unreachable.
CACHE_DOWN = (RedisError, DatabaseError, OSError)


class PortalUserRateThrottle(UserRateThrottle):
    """DRF's per-user rate (``API_THROTTLE_USER``), open while the cache is down."""

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except CACHE_DOWN as exc:
            logger.warning("API rate not counted, the cache is unreachable: %s", exc)
            return True


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
