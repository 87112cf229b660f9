"""OpenAPI generation: document the error answers every endpoint can give."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    """``{"detail": "…"}``; a 400 maps each field it refuses to a list of messages instead."""

    detail = serializers.CharField(required=False, help_text="Why it was refused, for people.")


class PortalAutoSchema(AutoSchema):
    """Adds 401 (no or bad credentials), 404 (unknown object, a job of another team, a page
    past the end) and 429 (over the caller's rate, with ``Retry-After``) to every operation,
    400 to writes and lists (bad fields or paging), and 413 to writes (a body over
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``)."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        codes = ["401", "404", "429"]
        if self.method in ("POST", "PUT", "PATCH"):
            codes.append("413")
        if self.method in ("POST", "PUT", "PATCH") or self._is_list_view():
            codes.insert(0, "400")
        for code in codes:
            responses.setdefault(code, self._get_response_for_code(ErrorDetailSerializer, code))
        return responses
