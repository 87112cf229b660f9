"""API representations of the catalog (read-only)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.formatting import format_duration
from queues.admission.capability import Resolution
from queues.models import CapabilityClass, GpuClass, Queue, Team
from queues.policy.parse import QUEUE_FIELDS


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

    class Meta:
        model = Queue
        # The API publishes exactly the terms the policy file sets.
        fields = list(QUEUE_FIELDS)

    @extend_schema_field(
        serializers.DictField(child=serializers.IntegerField(), help_text="min, default, max")
    )
    def get_job_priority(self, obj: Queue) -> dict[str, int]:
        return {
            "min": obj.min_job_priority,
            "default": obj.default_job_priority,
            "max": obj.max_job_priority,
        }
