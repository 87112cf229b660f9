"""Page-number pagination for every list endpoint."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class PortalPagination(PageNumberPagination):
    """``?page=N`` (from 1) and ``?page_size=M`` (1 to 500, default 50).

    Malformed values are refused as the schema says rather than silently replaced: a bad page is
    404 ("Invalid page."), a bad page size 400 naming the field.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        return request.query_params.get(self.page_query_param, 1)

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        # ASCII digits only: "³" passes str.isdigit() but int() refuses it.
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= self.max_page_size:
            raise ValidationError(
                {"page_size": [f"must be a whole number from 1 to {self.max_page_size}"]}
            )
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update({"minimum": 1, "maximum": self.max_page_size})
            elif parameter["name"] == self.page_query_param:
                parameter["schema"]["minimum"] = 1
        return parameters
