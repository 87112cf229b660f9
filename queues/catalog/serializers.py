"""API representations of the catalog (read-only)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.formatting import format_duration
from queues.admission.capability import Resolution
from queues.catalog.selectors import QueueLive
from queues.models import CapabilityClass, GpuClass, Queue, Team
from queues.policy.parse import QUEUE_FIELDS


@extend_schema_field({"type": "string", "example": "4h"})
class DurationText(serializers.Field):
    """A duration as the policy writes it (``"4h"``, ``"1h30m"``), plus seconds alongside."""

    def to_representation(self, value: Any) -> str:
        return format_duration(value)


class GpuClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuClass
        fields = [
            "name",
            "product",
            "description",
            "hbm_gb",
            "precisions",
            "mig_profiles",
            "rdma",
            "tier",
        ]


class MismatchSerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())


class CapabilityClassSerializer(serializers.ModelSerializer):
    resolves_to = serializers.SerializerMethodField(
        help_text="GPU classes that satisfy this capability class, least valuable first."
    )
    does_not_match = serializers.SerializerMethodField(
        help_text="Every other GPU class and why it does not satisfy the request."
    )

    class Meta:
        model = CapabilityClass
        fields = [
            "name",
            "description",
            "min_hbm_gb",
            "precisions",
            "mig_profile",
            "rdma",
            "min_tier",
            "resolves_to",
            "does_not_match",
        ]

    def _resolution(self, obj: CapabilityClass) -> Resolution:
        return obj.resolve(self.context["gpu_classes"])

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_resolves_to(self, obj: CapabilityClass) -> list[str]:
        return list(self._resolution(obj).matches)

    @extend_schema_field(MismatchSerializer(many=True))
    def get_does_not_match(self, obj: CapabilityClass) -> list[dict[str, Any]]:
        resolution = self._resolution(obj)
        return [
            {"gpu_class": name, "reasons": list(reasons)}
            for name, reasons in resolution.rejections.items()
        ]


class ClassCapacitySerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    free = serializers.DecimalField(
        max_digits=12, decimal_places=2, help_text="GPU-equivalents free now, as the page shows."
    )
    in_service = serializers.IntegerField(help_text="GPUs on healthy nodes in service.")
    maintenance = serializers.IntegerField(help_text="GPUs on cordoned or drained nodes.")
    unhealthy = serializers.IntegerField(help_text="GPUs on unhealthy or not-ready nodes.")
    used_outside = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        help_text="GPU-equivalents held by pods the portal did not create.",
    )


class QueueLiveSerializer(serializers.Serializer):
    """The queue's live state as of the last reconcile: the same numbers as its page."""

    expected_wait_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="For the queue's default job (1 GPU-equivalent, the default runtime, the "
        "cheapest allowed class, no CPU or memory ask) of the caller's teams, likely (jobs run "
        "their predicted runtimes, the forecast job pages show); null: unknown.",
    )
    expected_wait_latest_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="The same job's wait at the latest (every job runs to its runtime limit).",
    )
    expected_wait_note = serializers.CharField(
        allow_blank=True,
        help_text="Why the expected wait is unknown; beside a wait, that it is projected (more "
        "than 1,500 jobs waiting: the forecast projects the far end of the queue).",
    )
    wait_p50_seconds = serializers.IntegerField(allow_null=True)
    wait_p90_seconds = serializers.IntegerField(allow_null=True)
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    capacity = ClassCapacitySerializer(many=True)


def live_representation(live: QueueLive) -> dict[str, Any]:
    def seconds(span: timedelta | None) -> int | None:
        return None if span is None else int(span.total_seconds())

    by_class = {c.gpu_class: c for c in live.capacity}
    return {
        "expected_wait_seconds": seconds(live.expected_wait),
        "expected_wait_latest_seconds": seconds(live.expected_wait_latest),
        "expected_wait_note": live.expected_note,
        "wait_p50_seconds": seconds(live.wait_p50),
        "wait_p90_seconds": seconds(live.wait_p90),
        "pending": live.pending,
        "running": live.running,
        "capacity": [
            {
                "gpu_class": name,
                "free": str(free),
                "in_service": by_class[name].in_service if name in by_class else 0,
                "maintenance": by_class[name].maintenance if name in by_class else 0,
                "unhealthy": by_class[name].unhealthy if name in by_class else 0,
                "used_outside": str(by_class[name].used_outside if name in by_class else 0),
            }
            for name, free in live.free.items()
        ],
    }


class QueueSerializer(serializers.ModelSerializer):
    expected_wait_target = DurationText()
    max_runtime = DurationText()
    default_runtime = DurationText()
    grace_period = DurationText(allow_null=True)
    checkpoint_interval = DurationText(allow_null=True)
    allowed_gpu_classes: serializers.SlugRelatedField[GpuClass] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )
    allowed_capability_classes: serializers.SlugRelatedField[CapabilityClass] = (
        serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    )
    teams: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )
    job_priority = serializers.SerializerMethodField()
    live = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        # The terms exactly as the policy file sets them, and the live state beside them.
        fields = [*QUEUE_FIELDS, "live"]

    @extend_schema_field(QueueLiveSerializer)
    def get_live(self, obj: Queue) -> dict[str, Any] | None:
        live = self.context.get("live", {}).get(obj.pk)
        return live_representation(live) if live is not None else None

    @extend_schema_field(
        serializers.DictField(child=serializers.IntegerField(), help_text="min, default, max")
    )
    def get_job_priority(self, obj: Queue) -> dict[str, int]:
        return {
            "min": obj.min_job_priority,
            "default": obj.default_job_priority,
            "max": obj.max_job_priority,
        }
