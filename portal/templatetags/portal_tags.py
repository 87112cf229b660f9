"""Formatting shared by every page: durations, GPU amounts, money, time stamps."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from portal.formatting import (
    format_alternative,
    format_cpu,
    format_duration,
    format_free_devices,
    format_memory,
    format_relative,
    format_shape,
    money_text,
    number_text,
    reason_words,
)
from portal.masking import shown_env
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


@register.filter
def money(value: Decimal | None, currency: str = "") -> str:
    """An amount as people read it, with its currency when given: ``Decimal("15837.09")|money:
    "EUR"`` → ``15,837.09 EUR``; ``—`` (no currency) for None (not rated)."""
    text = money_text(value)
    return f"{text} {currency}" if value is not None and currency else text


@register.filter
def hours(value: Decimal | None) -> str:
    """Hours (GPU-hours, device-hours) with thousands separated and their places kept:
    ``Decimal("19507.210")`` → ``19,507.210``; ``—`` for None."""
    return number_text(value)


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


@register.filter
def cores(value: int | None) -> str:
    """Millicores as cores: ``4000`` → ``4 cores``."""
    return format_cpu(value) if value is not None else ""


@register.filter
def memory(value: int | None) -> str:
    """MiB as GiB where whole: ``32768`` → ``32 GiB``."""
    return format_memory(value) if value is not None else ""


@register.filter
def alternative_change(alternative: Any) -> str:
    """What following a "would start sooner" suggestion changes."""
    return format_alternative(
        queue=alternative.queue,
        capability=alternative.capability,
        preemption=alternative.preemption,
        same_queue=alternative.same_queue,
        same_capability=alternative.same_capability,
        sharing=alternative.sharing,
    )


@register.inclusion_tag("_time.html")
def when(value: object, relative: bool = True) -> dict[str, object]:
    """A time stamp as ``<time>``: UTC in the markup (and on hover), local time on screen, and
    how far from now it is beside it ("in 12 min", "3 h ago")."""
    ago = format_relative(value, timezone.now()) if relative and isinstance(value, datetime) else ""
    return {"value": value, "relative": ago}


@register.filter
def shape(job: Any) -> str:
    """A job's pods and devices in words: ``2 pods × 8 GPUs``."""
    return format_shape(
        pods=job.pods,
        per_pod=job.gpus_per_pod,
        mig_profile=job.mig_profile or job.capability_class.mig_profile or "",
        time_sliced=job.queue.sharing_mode == "time-sliced",
    )


@register.filter
def env_shown(env: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Environment variables as shown on a page, by name: a reference to a Secret's key as
    ``{"secret", "key"}``, secret-looking plain values masked (``portal.masking``, the rule the
    API shares)."""
    return list(shown_env(env or {}).items())


@register.filter(name="reason_words")
def reason_words_filter(code: str) -> str:
    """A pending reason's code in a few plain words."""
    return reason_words(code)


@register.filter
def free_of(devices: dict[str, Any] | None, gpu_class: str) -> str:
    """A class's free devices in words (``FreeDevices`` by class; empty when unknown)."""
    free = (devices or {}).get(gpu_class)
    if free is None:
        return ""
    return format_free_devices(
        gpus=free.gpus, slices=free.slices, replicas=free.replicas, per_gpu=free.per_gpu
    )


@register.filter
def rate_cards(versions: Iterable[object] | str | None) -> str:
    """Rate-card versions (their ``effective_from``, ISO 8601 in UTC) as people read them: the
    day a card took effect, with the time only when it is not midnight —
    ``["2026-10-15T00:00:00Z"]`` → ``"from 2026-10-15"``. One version may come as a string."""
    if isinstance(versions, str):
        versions = [versions]
    shown = []
    for version in versions or ():
        text = str(version)
        day, _, clock = text.partition("T")
        time_of_day = clock.removesuffix("Z")[:5]
        shown.append(
            f"from {day}" if time_of_day in ("", "00:00") else f"from {day} {time_of_day} UTC"
        )
    return ", ".join(shown)
