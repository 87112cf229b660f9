"""What is decided before any view runs: the probes' own path, and request limits."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import resolve

# Called by machines inside the cluster, not by people through the public name: the kubelet's
# probes (Host: the pod's IP) and Prometheus' scrape (Host: the pod's IP or the Service's
# name), over plain HTTP. Neither reads the Host, a session or a cookie.
PROBE_PATHS = frozenset({"/healthz", "/metrics"})


class ProbeMiddleware:
    """``/healthz`` and ``/metrics`` answered whatever the ``Host`` and the scheme, before
    ``ALLOWED_HOSTS`` (checked by the first middleware that asks for the host) and the HTTPS
    redirect see them: the kubelet and Prometheus reach the pod by its IP over plain HTTP. The
    views keep their own rules (``/metrics`` still wants its bearer token); every other path
    still gets the host check and the redirect."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info not in PROBE_PATHS:
            return self.get_response(request)
        match = resolve(request.path_info)
        response: HttpResponse = match.func(request, *match.args, **match.kwargs)
        return response


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


class NulCharacterMiddleware:
    """An address with a NUL character (``%00``) in its path or query is a 400 before any view
    runs: no page takes one, and PostgreSQL refuses such a string wherever a view would look it
    up or filter by it (a 500 otherwise)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info or any(
            "\x00" in key or any("\x00" in value for value in values)
            for key, values in request.GET.lists()
        ):
            raise BadRequest("the address contains a NUL character (%00)")
        return self.get_response(request)
