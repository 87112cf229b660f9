"""Project-level views: health for load balancers and the home redirect."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.defaults import page_not_found


def healthz(request: HttpRequest) -> HttpResponse:
    """200 when the database answers, 503 otherwise (no authentication: load balancers call it)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return JsonResponse({"status": "unavailable", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})


def home(request: HttpRequest) -> HttpResponse:
    return redirect("queues:catalog")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404: JSON under /api/ (scripts parse it), the HTML page everywhere else."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
