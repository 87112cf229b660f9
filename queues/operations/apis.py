"""The admin side's REST API: the quota grid to read, one quota to change (staff only).

A change goes through the same policy service as the grid's page and a policy file, so it is
refused with the same message and numbers, and the audit log records it as coming from the API.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.formatting import NOT_ASCII_NUMBER, is_ascii_number_text
from portal.http import signed_in
from portal.roles import is_admin
from portal.schema import ErrorDetailSerializer
from queues.audit import AuditSource, audit_context
from queues.operations.selectors import quota_grid
from queues.operations.services import quota_update
from queues.policy.parse import PolicyError


class IsAdmin(permissions.BasePermission):
    """Admins only (``portal.roles.is_admin``): members and finance get 403, anonymous callers
    401."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and is_admin(request.user))


class _Amount(serializers.DecimalField):
    """An amount in ASCII digits (Decimal() would read fullwidth and Arabic-Indic ones)."""

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, str) and not is_ascii_number_text(data):
            raise serializers.ValidationError(NOT_ASCII_NUMBER)
        return Decimal(super().to_internal_value(data))


class QuotaSerializer(serializers.Serializer):
    team = serializers.CharField(read_only=True)
    gpu_class = serializers.CharField(read_only=True)
    nominal = _Amount(max_digits=10, decimal_places=3, min_value=Decimal(0))
    borrowing_limit = _Amount(max_digits=10, decimal_places=3, min_value=Decimal(0))
    in_use = serializers.DecimalField(max_digits=10, decimal_places=3, read_only=True)
    held_back = serializers.IntegerField(
        read_only=True, help_text="Pending jobs this quota holds back now."
    )


# A 400's body, as every 400 of the API: each field refused maps to its messages; a refusal of
# the quota as a whole (the policy's checks: over the class's capacity…) comes under
# ``non_field_errors``; a body that is not JSON at all gets ``detail``.
NON_FIELD = "non_field_errors"


class QuotaRefusalSerializer(serializers.Serializer):
    nominal = serializers.ListField(child=serializers.CharField(), required=False)
    borrowing_limit = serializers.ListField(child=serializers.CharField(), required=False)
    non_field_errors = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Why the policy refuses the quota as a whole, with the numbers.",
    )
    detail = serializers.CharField(required=False, help_text="A body that could not be read.")


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "team": cell.team.name,
            "gpu_class": cell.gpu_class.name,
            "nominal": cell.nominal,
            "borrowing_limit": cell.borrowing_limit,
            "in_use": cell.in_use,
            "held_back": cell.held_back,
        }
        for row in quota_grid().rows
        for cell in row.cells
    ]


class QuotaListView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        tags=["admin"],
        summary="The quota grid: every active team × GPU class, with use and jobs held back",
        responses={200: QuotaSerializer(many=True), 403: ErrorDetailSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(QuotaSerializer(_rows(), many=True).data)


class QuotaView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        tags=["admin"],
        summary="Set one team's quota of one GPU class (checked as a policy file is)",
        request=QuotaSerializer,
        responses={
            200: QuotaSerializer,
            400: OpenApiResponse(
                QuotaRefusalSerializer,
                description="Refused: a field's value, or the quota as a whole (e.g. over the "
                "class's capacity).",
            ),
            403: ErrorDetailSerializer,
            404: ErrorDetailSerializer,
        },
    )
    def put(self, request: Request, team: str, gpu_class: str) -> Response:
        body = QuotaSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not any(r["team"] == team and r["gpu_class"] == gpu_class for r in _rows()):
            return Response(
                {"detail": f"no active team {team} or GPU class {gpu_class}"},
                status=status.HTTP_404_NOT_FOUND,
            )
        user = signed_in(request.user)
        try:
            with audit_context(actor=user, source=AuditSource.API):
                quota_update(
                    team=team,
                    gpu_class=gpu_class,
                    nominal=body.validated_data["nominal"],
                    borrowing_limit=body.validated_data["borrowing_limit"],
                )
        except PolicyError as refused:
            return Response(
                {NON_FIELD: [str(p) for p in refused.problems]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        row = next(r for r in _rows() if r["team"] == team and r["gpu_class"] == gpu_class)
        return Response(QuotaSerializer(row).data)
