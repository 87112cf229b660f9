"""Every request gets an id and one log line.

The id is the caller's ``X-Request-ID`` when it is well-formed (a proxy or load balancer may set
one), else a new one; it is returned in the response's ``X-Request-ID`` header and carried by
every log line written while the request is served (:mod:`portal.logs`). When the response is
ready one line records the method, path, status, user and duration: the access log, in the
same format as everything else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject

from portal.logs import REQUEST_ID, request_id_from

logger = logging.getLogger("portal.request")

HEADER = "X-Request-ID"


class RequestIdMiddleware:
    """First in ``MIDDLEWARE``, so that even an error page carries the id."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(HEADER))
        # Also on the request: Django logs a 4xx or 5xx ("django.request") after the middleware
        # returned, with the request on the record (``RequestIdFilter`` reads it there).
        request.request_id = request_id  # type: ignore[attr-defined]
        token = REQUEST_ID.set(request_id)
        started = time.monotonic()
        try:
            response = self.get_response(request)
            response[HEADER] = request_id
            logger.info(
                "%s %s %s",
                request.method,
                request.path,
                response.status_code,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "user": _username(request),
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                },
            )
            return response
        finally:
            REQUEST_ID.reset(token)


def _username(request: HttpRequest) -> str:
    """Who made the request, if the request already found out: a user nobody looked at is not
    loaded now (that would query the database, which may be what just failed)."""
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        user = getattr(request, "_cached_user", None)
    if user is None or not user.is_authenticated:
        return ""
    return str(user.get_username())
