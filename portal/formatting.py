"""How durations, times and values are written and read, the same everywhere: pages, the API,
policy files and their diffs."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

# ASCII digits only: "١h" (an Arabic-Indic one) is not read as 1h.
_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")


def parse_duration(value: Any) -> timedelta:
    """``"90s"``, ``"15m"``, ``"4h"``, ``"1h30m"``, ``"7d"`` or a number of seconds → timedelta.
    Raises ValueError with a message for people (the form and the API show it as it is)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration like '4h' or '30m'")
    try:
        if isinstance(value, int):
            return timedelta(seconds=value)
        if isinstance(value, str):
            match = _DURATION.fullmatch(value.strip())
            if match and any(match.groups()):
                days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
                return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError as exc:
        raise ValueError(f"{str(value)[:40]} is too long a duration") from exc
    raise ValueError(f"{str(value)[:40]!r} is not a duration like '4h', '30m' or '1h30m'")


def format_duration(value: timedelta) -> str:
    """The shortest canonical spelling ``parse_duration`` reads back: 5400 s → ``"1h30m"``."""
    total = int(value.total_seconds())
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def format_datetime(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def display(value: Any) -> str:
    """A policy value as people read it in a diff."""
    if value is None:
        return "—"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, datetime):
        return format_datetime(value)
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, list):
        return "[" + ", ".join(display(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


HIDDEN_CHARACTERS = "must not contain control or invisible formatting characters"


def has_hidden_characters(text: str) -> bool:
    """Whether ``text`` holds control characters or invisible formatting ones (bidirectional
    overrides among them), which would make a name read differently from what it is."""
    return any(unicodedata.category(c) in ("Cc", "Cf") for c in text)
