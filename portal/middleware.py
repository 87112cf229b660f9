"""Request limits checked before any view runs."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class ApiBodyLimitMiddleware:
    """An API request whose body is larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is answered 413
    in the API's JSON shape before anything reads it (Django would answer an HTML 400 naming no
    field, and only once a view touched the body)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and request.path.startswith("/api/"):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                return JsonResponse(
                    {
                        "detail": f"the request body is {length:,} bytes; "
                        f"at most {limit:,} are accepted"
                    },
                    status=413,
                )
        return self.get_response(request)
