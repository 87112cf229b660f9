"""Formatting shared by every page: durations, GPU amounts, time stamps."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django import template

from queues.policy import format_duration

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    """``timedelta(hours=1, minutes=30)`` → ``1h30m``; empty for None."""
    return format_duration(value) if value is not None else ""


@register.filter
def gpus(value: Decimal | int | None) -> str:
    """A GPU-equivalent amount without trailing zeros: ``Decimal('8.000')`` → ``8``."""
    if value is None:
        return ""
    number = Decimal(value)
    return (
        format(number.normalize(), "f")
        if number != number.to_integral_value()
        else str(int(number))
    )


@register.inclusion_tag("_time.html")
def when(value: object) -> dict[str, object]:
    """A time stamp as ``<time>``: UTC in the markup (and on hover), local time on screen."""
    return {"value": value}


@register.filter
def roughly(value: timedelta | None) -> str:
    """An estimate, rounded as people say it: ``~12h`` rather than ``11h59m17s``."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    if seconds < 60:
        return "under a minute"
    step = 60 if seconds < 2 * 3600 else 15 * 60
    return "~" + format_duration(timedelta(seconds=round(seconds / step) * step))
