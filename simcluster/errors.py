"""Kubernetes ``Status`` errors, as the API server answers them.

Every failure the simulated API server returns is an :class:`ApiError` turned into a ``Status``
object (``kind: Status``, ``status: Failure``, ``reason``, ``code``, ``message``, ``details``), so
the official client raises ``ApiException`` with the same status and body as against a real
cluster.
"""

from __future__ import annotations

from typing import Any

# The reason a real API server gives for each HTTP status it uses.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A failed API call: HTTP ``code``, Kubernetes ``reason`` and a human ``message``."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the API server sends for this error."""
        return failure_status(self.code, self.reason, self.message, self.details)


def failure_status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` of ``Failure`` (also the object of a watch ``ERROR`` event)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def success_status(*, name: str, group: str, kind: str, uid: str) -> dict[str, Any]:
    """The ``Status`` of ``Success`` returned when a delete removed the object at once."""
    details = {"name": name, "kind": kind, "uid": uid}
    if group:
        details["group"] = group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def qualified(resource: str, group: str) -> str:
    """``jobs.batch`` for a grouped resource, ``pods`` for the core group (as messages say)."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404 ``NotFound``: ``jobs.batch "x" not found``."""
    return ApiError(
        404,
        f'{qualified(resource, group)} "{name}" not found',
        details=_details(resource, name, group),
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """409 ``AlreadyExists``: ``namespaces "x" already exists``."""
    return ApiError(
        409,
        f'{qualified(resource, group)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(resource, name, group),
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    """409 ``Conflict``: the optimistic-concurrency failure of a stale resourceVersion."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        details=_details(resource, name, group),
    )


def invalid(kind: str, name: str, group: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 ``Invalid`` with one cause per ``(field, message)``, in the API server's wording."""
    full_kind = f"{kind}.{group}" if group else kind
    text = "; ".join(f"{field}: {message}" for field, message in causes)
    if len(causes) > 1:
        text = f"[{', '.join(f'{field}: {message}' for field, message in causes)}]"
    return ApiError(
        422,
        f'{full_kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": message, "field": field}
                for field, message in causes
            ],
        },
    )


def bad_request(message: str) -> ApiError:
    """400 ``BadRequest`` (malformed body, unsupported selector, wrong namespace)."""
    return ApiError(400, message)


def _details(resource: str, name: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details
