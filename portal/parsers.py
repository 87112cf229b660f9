"""The JSON the API accepts: a body nested too deep for the parser is a 400, not a 500."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class PortalJSONParser(JSONParser):
    """DRF's JSON parser, but a body nested deeper than Python's recursion limit (thousands of
    brackets) is refused as malformed instead of failing the request."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the body is nested too deeply") from exc
