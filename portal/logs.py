"""Log lines: one JSON object per line (``LOG_FORMAT=json``, production's default) or plain text.

Every line carries the id of the request (or Celery task) it was written for, so that one
request's lines can be found among many workers'. Extra fields a caller passes with
``extra={...}`` (``job_id``, ``cluster_object``, …) become keys of the JSON object.

The request id lives in a context variable: :class:`portal.middleware.RequestIdMiddleware` sets
it for a web request, the reconcile task for its run. This module imports no Django, so that
the settings can name its classes.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger.json import JsonFormatter

REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="")
# What an incoming X-Request-ID may be: a proxy's id is kept only if it cannot forge log
# structure (no spaces, quotes or control characters) and is of sane length.
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
LOG_FORMATS = ("json", "text")


def request_id_from(incoming: str | None) -> str:
    """The incoming id when it is well-formed, else a new one (32 hex digits)."""
    if incoming and REQUEST_ID_PATTERN.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Stamps every record with the current request id ("" outside any request or task), or
    that of the request the record carries (Django's own lines about a response's status are
    written after the request's middleware has returned)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get() or getattr(
            getattr(record, "request", None), "request_id", ""
        )
        return True


class PortalJsonFormatter(JsonFormatter):
    """``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``request_id``, then any
    extra fields; an exception as ``exc_info`` text."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("fmt", "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s")
        kwargs.setdefault(
            "rename_fields", {"asctime": "time", "levelname": "level", "name": "logger"}
        )
        kwargs.setdefault("datefmt", "%Y-%m-%dT%H:%M:%S%z")
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """The ``LOGGING`` dict for Django: every record to standard error, in ``log_format``."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"LOG_FORMAT={log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "portal.logs.RequestIdFilter"}},
        "formatters": {
            "json": {"()": "portal.logs.PortalJsonFormatter"},
            "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                "filters": ["request_id"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }
