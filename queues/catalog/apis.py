"""REST endpoints of the catalog. Thin: visibility comes from selectors."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import viewsets

from portal.http import signed_in
from queues.catalog.selectors import queues_live, queues_visible_to
from queues.catalog.serializers import (
    CapabilityClassSerializer,
    GpuClassSerializer,
    QueueSerializer,
)
from queues.models import CapabilityClass, GpuClass, Queue


class QueueViewSet(viewsets.ReadOnlyModelViewSet):
    """Queues the caller's teams may submit to, with their published service terms."""

    serializer_class = QueueSerializer
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9.-]+"

    def get_queryset(self) -> QuerySet[Queue]:
        if getattr(self, "swagger_fake_view", False):  # the schema is generated without a user
            return Queue.objects.none()
        return queues_visible_to(signed_in(self.request.user)).order_by("-priority", "name")

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        # The live state of exactly the queues being answered, in a fixed number of queries.
        if args and getattr(self, "swagger_fake_view", False) is False:
            queues = args[0] if isinstance(args[0], list | QuerySet) else [args[0]]
            if all(isinstance(q, Queue) for q in queues):
                kwargs.setdefault("context", self.get_serializer_context())
                kwargs["context"]["live"] = queues_live(
                    list(queues), signed_in(self.request.user), now=timezone.now()
                )
        return super().get_serializer(*args, **kwargs)


class GpuClassViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU classes the cluster offers."""

    serializer_class = GpuClassSerializer
    queryset = GpuClass.objects.active().order_by("tier", "name")
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9.-]+"


class CapabilityClassViewSet(viewsets.ReadOnlyModelViewSet):
    """Capability classes, each with the GPU classes it resolves to and why not the others."""

    serializer_class = CapabilityClassSerializer
    queryset = CapabilityClass.objects.active().order_by("name")
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9.-]+"

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        context["gpu_classes"] = list(GpuClass.objects.active().order_by("tier", "name"))
        return context
