"""The chargeback API: a statement for a month or any range, as JSON or CSV."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import Http404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chargeback.exports import report_csv, report_data, view_data
from chargeback.selectors import AsOfRefused, statement_view, team_ids_visible_to
from chargeback.services import INSTANT_EXPECTED, parse_instant, parse_month
from chargeback.statements import DEFAULT_GROUP_BY, DIMENSIONS, statement
from portal.formatting import format_datetime
from portal.schema import ErrorDetailSerializer
from queues.cluster.prometheus import prometheus_from_settings

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

    default_error_messages = {"invalid": INSTANT_EXPECTED}

    def to_internal_value(self, data: Any) -> datetime:
        try:
            return parse_instant(str(data))
        except ValueError:
            self.fail("invalid")
            raise  # (fail raises)

    def to_representation(self, value: Any) -> str:
        return str(value)


class StatementQuery(serializers.Serializer):
    period = serializers.CharField(required=False)
    start = InstantField(required=False)
    end = InstantField(required=False)
    group_by = serializers.CharField(required=False)
    as_of = InstantField(required=False)

    def validate_as_of(self, value: datetime) -> datetime:
        if value > timezone.now():
            raise serializers.ValidationError(
                f"{format_datetime(value)} is in the future: a statement counts what was held "
                "up to its as-of instant"
            )
        return value

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
        # An empty value (``?start=``) is a bad value, not an absent one.
        for name in ("period", "start", "end", "group_by", "as_of"):
            if name in self.initial_data and name not in attrs:
                raise serializers.ValidationError({name: "must not be empty"})
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


class ForecastSerializer(serializers.Serializer):
    team = serializers.CharField()
    currency = serializers.CharField()
    billed_so_far = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="The statement's cost as of as_of."
    )
    running_jobs_to_likely_end = serializers.DecimalField(
        max_digits=18,
        decimal_places=2,
        help_text="GPUs held at as_of carried on to their jobs' predicted ends (the runtime "
        "prediction of the start estimates; the runtime limit without history), at most to the "
        "month's end. Jobs told to stop add nothing.",
    )
    new_work_at_run_rate = serializers.DecimalField(
        max_digits=18,
        decimal_places=2,
        help_text="The team's mean daily cost over the 21 days before as_of × the days left, "
        "less what its running jobs fill (not below 0).",
    )
    total = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="The sum of the three parts."
    )
    low = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="About 90 % range.")
    high = serializers.DecimalField(max_digits=18, decimal_places=2)
    run_rate_per_day = serializers.DecimalField(max_digits=18, decimal_places=2)
    running_jobs = serializers.IntegerField()
    days_left = serializers.DecimalField(max_digits=6, decimal_places=1)


class WasteSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="Empty in waste_totals.")
    queue = serializers.CharField()
    gpu_class = serializers.CharField()
    preempted_gpu_hours = serializers.DecimalField(
        max_digits=18,
        decimal_places=3,
        help_text="From each preempted job's last checkpoint (or its start) until its pods let "
        "go of the GPUs, stopping grace included.",
    )
    drained_gpu_hours = serializers.DecimalField(
        max_digits=18, decimal_places=3, help_text="The same for jobs stopped by a node drain."
    )
    failed_gpu_hours = serializers.DecimalField(
        max_digits=18, decimal_places=3, help_text="All that failed jobs held."
    )
    idle_gpu_hours = serializers.DecimalField(
        max_digits=18,
        decimal_places=3,
        allow_null=True,
        help_text="Allocated but idle, from the GPU duty cycle; null: not measured.",
    )


class BudgetSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["team", "cost_center"])
    name = serializers.CharField()
    teams = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField()
    amount = serializers.DecimalField(max_digits=18, decimal_places=2)
    spent = serializers.DecimalField(max_digits=18, decimal_places=2)
    spent_percent = serializers.DecimalField(max_digits=9, decimal_places=1)
    forecast = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True)
    forecast_percent = serializers.DecimalField(max_digits=9, decimal_places=1, allow_null=True)
    level = serializers.ChoiceField(
        choices=[0, 80, 100], help_text="80 or 100: spend or forecast reached that % of it."
    )


class CapacitySerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    pool = serializers.CharField(help_text="The class's node pool; empty without one.")
    used = serializers.DecimalField(max_digits=18, decimal_places=3)
    idle = serializers.DecimalField(
        max_digits=18,
        decimal_places=3,
        help_text="In service, held by nobody, not reserved and not kept warm by a floor.",
    )
    warm_idle = serializers.DecimalField(
        max_digits=18,
        decimal_places=3,
        help_text="Idle on nodes a queue's warm floor held empty (docs/chargeback.md).",
    )
    reserved_idle = serializers.DecimalField(max_digits=18, decimal_places=3)
    unhealthy = serializers.DecimalField(max_digits=18, decimal_places=3)
    maintenance = serializers.DecimalField(max_digits=18, decimal_places=3)
    outside = serializers.DecimalField(max_digits=18, decimal_places=3)
    allocatable = serializers.DecimalField(max_digits=18, decimal_places=3)
    used_without_node_history = serializers.DecimalField(max_digits=18, decimal_places=3)


class StatementSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    as_of = serializers.DateTimeField(
        help_text="What the numbers count: usage held up to this instant, nothing after."
    )
    period = serializers.CharField(allow_null=True)
    closed = serializers.BooleanField()
    group_by = serializers.ListField(child=serializers.CharField())
    lines = LineSerializer(many=True)
    totals = TotalsSerializer()
    adjustments = LineSerializer(many=True)
    adjustment_totals = TotalsSerializer()
    forecast = ForecastSerializer(many=True, help_text="Open month only.")
    waste = WasteSerializer(many=True, help_text="By team, queue and GPU class.")
    waste_totals = WasteSerializer()
    budgets = BudgetSerializer(many=True, help_text="A period's budgets the caller may see.")
    idle_capacity = CapacitySerializer(
        many=True, allow_null=True, help_text="Finance only (null for members)."
    )


class ChargebackView(APIView):
    renderer_classes = [renderers.JSONRenderer, CsvRenderer]

    @extend_schema(
        tags=["chargeback"],
        summary="A chargeback statement: a month's, or any range's",
        description=(
            "`period=YYYY-MM` gives the month as the chargeback page shows it (frozen once "
            "closed, with adjustments apart), with its forecast, waste, budgets and (finance) "
            "idle capacity; `start` and `end` give any range. `as_of` fixes the instant the "
            "numbers are computed at (default: now while open, the close for a closed month): "
            "the same `as_of` gives the same totals on the page, in the CSV and here. "
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
            OpenApiParameter(
                "as_of",
                OpenApiTypes.DATETIME,
                description="Count usage held up to this instant only (not in the future). "
                "Default: now for an open month or a range, the close for a closed month.",
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
        now = timezone.now()
        as_of = params.get("as_of")
        if "period" in params:
            try:
                view = statement_view(
                    user=request.user,
                    month=params["period"],
                    now=now,
                    as_of=as_of,
                    prometheus=prometheus_from_settings(),
                )
            except AsOfRefused as exc:
                raise ValidationError({"as_of": [str(exc)]}) from exc
            data = view_data(view)
        else:
            group_by = params.get("group_by", DEFAULT_GROUP_BY)
            result = statement(
                start=params["start"],
                end=params["end"],
                now=as_of or now,
                group_by=group_by,
                team_ids=team_ids_visible_to(request.user),
            )
            data = report_data(
                start=result.start,
                end=result.end,
                as_of=result.now,
                group_by=result.group_by,
                lines=result.lines,
                totals=result.totals,
            )
        response = Response(data)
        if request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = 'attachment; filename="chargeback.csv"'
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        if not force and request.query_params.get("format", "json") not in ("json", "csv"):
            raise ValidationError({"format": ["expected json or csv"]})
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
