"""Formatting shared by every page: durations, GPU amounts, time stamps."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from django import template
from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from portal.formatting import format_duration
from portal.views import plotly_version

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


# A UTC time stamp inside a text: ``2025-03-04 14:30 UTC`` (reasons, hints) or ISO 8601 in UTC
# (``2025-03-04T14:30:00+00:00``, timeline messages). Neither contains a character HTML escapes.
_STAMP = re.compile(
    r"(?<![\d-])(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(?::(\d{2})(?:\.\d+)?)?(?: UTC|\+00:00|Z)"
)


def _time_element(match: re.Match[str]) -> str:
    stamp = f"{match[1]}T{match[2]}:{match[3] or '00'}Z"
    return f'<time datetime="{stamp}">{match[0]}</time>'


@register.filter(needs_autoescape=True)
def times(text: object, autoescape: bool = True) -> SafeString:
    """``text`` with every UTC time stamp in it as a ``<time>``, so that pages show it in the
    viewer's time zone like every other time (UTC stays in the markup and on hover)."""
    as_text = text if isinstance(text, str) else str(text)
    escaped = conditional_escape(as_text) if autoescape else as_text
    # Stamps hold only digits, "-", ":", ".", "+", "T", "Z", spaces and "UTC": escaping the
    # text first leaves them as they were, and the <time> markup is added after.
    return mark_safe(_STAMP.sub(_time_element, "" if text is None else escaped))


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


@register.simple_tag
def plotly_script() -> SafeString:
    """The script tag loading plotly.js from the installed package (see ``portal.views``); not
    deferred: the charts' inline scripts call it as the page is read."""
    return format_html('<script src="{}?v={}"></script>', reverse("plotly-js"), plotly_version())
