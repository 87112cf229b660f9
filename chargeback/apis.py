"""The chargeback API: a statement for a month or any range, as JSON or CSV."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chargeback.exports import report_csv, report_data
from chargeback.selectors import period_report, team_ids_visible_to
from chargeback.services import parse_month
from chargeback.statements import DEFAULT_GROUP_BY, DIMENSIONS, statement
from portal.schema import ErrorDetailSerializer

MAX_RANGE_DAYS = 400


class CsvRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> bytes:
        return report_csv(data).encode()


class InstantField(serializers.Field):
    """A date (midnight UTC) or an ISO 8601 date-time (UTC when it names no offset)."""

    default_error_messages = {"invalid": "expected a date (2026-11-01) or an ISO 8601 date-time"}

    def to_internal_value(self, data: Any) -> datetime:
        text = str(data)
        try:
            parsed = parse_datetime(text)
            day = None if parsed else parse_date(text)
        except ValueError:
            self.fail("invalid")
        if parsed is None and day is None:
            self.fail("invalid")
        value = parsed or datetime.combine(day, time(0), tzinfo=UTC)  # type: ignore[arg-type]
        if timezone.is_naive(value):
            value = value.replace(tzinfo=UTC)
        if not datetime(1970, 1, 1, tzinfo=UTC) <= value <= datetime(9000, 1, 1, tzinfo=UTC):
            self.fail("invalid")
        return value.astimezone(UTC)

    def to_representation(self, value: Any) -> str:
        return str(value)


class StatementQuery(serializers.Serializer):
    period = serializers.CharField(required=False)
    start = InstantField(required=False)
    end = InstantField(required=False)
    group_by = serializers.CharField(required=False)

    def validate_period(self, value: str) -> Any:
        try:
            return parse_month(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def validate_group_by(self, value: str) -> tuple[str, ...]:
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in DIMENSIONS]
        if not names or unknown:
            raise serializers.ValidationError(
                f"expected a comma-separated list of {', '.join(DIMENSIONS)}"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            )
        return tuple(dict.fromkeys(names))

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "period" in attrs:
            if "start" in attrs or "end" in attrs:
                raise serializers.ValidationError({"period": "give either period or start and end"})
            if attrs.get("group_by", DEFAULT_GROUP_BY) != DEFAULT_GROUP_BY:
                raise serializers.ValidationError(
                    {"group_by": "a period's statement is grouped by " + ",".join(DEFAULT_GROUP_BY)}
                )
            return attrs
        if "start" not in attrs and "end" not in attrs:
            # Nothing asked: the current month's statement, as on the page.
            if "group_by" in attrs and attrs["group_by"] != DEFAULT_GROUP_BY:
                raise serializers.ValidationError(
                    {"group_by": "with group_by, give start and end (or period=YYYY-MM)"}
                )
            attrs["period"] = timezone.now().date().replace(day=1)
            return attrs
        if "start" not in attrs or "end" not in attrs:
            missing = "start" if "start" not in attrs else "end"
            raise serializers.ValidationError({missing: "required (or give period=YYYY-MM)"})
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "must be after start"})
        if (attrs["end"] - attrs["start"]).days > MAX_RANGE_DAYS:
            raise serializers.ValidationError({"end": f"at most {MAX_RANGE_DAYS} days after start"})
        return attrs


class LineSerializer(serializers.Serializer):
    team = serializers.CharField(required=False)
    cost_center = serializers.CharField(required=False)
    gpu_class = serializers.CharField(required=False)
    sharing_mode = serializers.CharField(required=False)
    job = serializers.IntegerField(required=False)
    for_period = serializers.CharField(required=False, help_text="Adjustments: the closed month.")
    currency = serializers.CharField(help_text="Empty when no rate card rated the use.")
    device_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    normalized_gpu_hours = serializers.DecimalField(
        max_digits=18, decimal_places=3, allow_null=True
    )
    cost = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True)
    rate_card_versions = serializers.ListField(child=serializers.CharField())
    provisional = serializers.BooleanField()
    note = serializers.CharField()


class TotalsSerializer(serializers.Serializer):
    device_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    normalized_gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    cost = serializers.DictField(child=serializers.DecimalField(max_digits=18, decimal_places=2))


class StatementSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    period = serializers.CharField(allow_null=True)
    closed = serializers.BooleanField()
    group_by = serializers.ListField(child=serializers.CharField())
    lines = LineSerializer(many=True)
    totals = TotalsSerializer()
    adjustments = LineSerializer(many=True)
    adjustment_totals = TotalsSerializer()


class ChargebackView(APIView):
    renderer_classes = [renderers.JSONRenderer, CsvRenderer]

    @extend_schema(
        tags=["chargeback"],
        summary="A chargeback statement: a month's, or any range's",
        description=(
            "`period=YYYY-MM` gives the month as the chargeback page shows it (frozen once "
            "closed, with adjustments apart); `start` and `end` give any range, computed now. "
            "Lines are rounded once (half up; hours to 0.001, money to the cent) and totals are "
            "sums of lines. Members get their teams' lines only. CSV with `format=csv` or "
            "`Accept: text/csv`."
        ),
        parameters=[
            OpenApiParameter("period", str, pattern=r"^\d{4}-\d{2}$", description="A month."),
            OpenApiParameter(
                "start", OpenApiTypes.DATETIME, description="Range start (or a date)."
            ),
            OpenApiParameter("end", OpenApiTypes.DATETIME, description="Range end, excluded."),
            OpenApiParameter(
                "group_by",
                str,
                description=f"Comma-separated, of: {', '.join(DIMENSIONS)}. "
                f"Default {','.join(DEFAULT_GROUP_BY)}.",
            ),
            OpenApiParameter("format", str, enum=["json", "csv"], description="Default json."),
        ],
        responses={
            (200, "application/json"): StatementSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The same, as CSV."),
            400: OpenApiResponse(ErrorDetailSerializer, description="A parameter is wrong."),
        },
    )
    def get(self, request: Request) -> Response:
        query = StatementQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        team_ids = team_ids_visible_to(request.user)
        now = timezone.now()
        if "period" in params:
            report = period_report(month=params["period"], now=now, team_ids=team_ids)
            data = report_data(
                start=report.start,
                end=report.end,
                group_by=DEFAULT_GROUP_BY,
                lines=report.lines,
                totals=report.totals,
                adjustments=report.adjustments,
                adjustment_totals=report.adjustment_totals,
                period=report.month,
                closed=report.closed,
            )
        else:
            group_by = params.get("group_by", DEFAULT_GROUP_BY)
            result = statement(
                start=params["start"],
                end=params["end"],
                now=now,
                group_by=group_by,
                team_ids=team_ids,
            )
            data = report_data(
                start=result.start,
                end=result.end,
                group_by=result.group_by,
                lines=result.lines,
                totals=result.totals,
            )
        response = Response(data)
        if request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = 'attachment; filename="chargeback.csv"'
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        try:
            return super().perform_content_negotiation(request, force)
        except Http404 as exc:  # an unknown ?format= is a bad parameter, not a missing page
            raise ValidationError({"format": ["expected json or csv"]}) from exc

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # Only a statement is CSV: errors and OPTIONS' metadata are JSON whatever was asked for.
        statement_data = isinstance(getattr(response, "data", None), dict) and "lines" in (
            response.data
        )
        if not statement_data and isinstance(
            getattr(request, "accepted_renderer", None), CsvRenderer
        ):
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)
