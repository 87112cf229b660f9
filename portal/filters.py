"""The list endpoints' filtering: django-filter's, refusing what a list does not know."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError


class StrictFilterBackend(DjangoFilterBackend):
    """``DjangoFilterBackend`` that answers 400, naming it, for a query parameter the list takes
    neither as a filter nor for paging: ``?status=pending`` silently listed every job, which
    reads as "these are the pending ones". Lists without a filter set are left as they are."""

    def filter_queryset(self, request: Any, queryset: QuerySet, view: Any) -> QuerySet:
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is not None:
            known = set(filterset_class.base_filters) | {"format"}
            paginator = getattr(view, "paginator", None)
            for name in ("page_query_param", "page_size_query_param"):
                if getattr(paginator, name, None):
                    known.add(getattr(paginator, name))
            unknown = sorted(set(request.query_params) - known)
            if unknown:
                takes = ", ".join(sorted(known))
                raise ValidationError(
                    {name: [f"not a parameter of this list (it takes {takes})"] for name in unknown}
                )
        return super().filter_queryset(request, queryset, view)
