"""How durations, times, amounts and values are written and read, the same everywhere: pages, the
API, policy files and their diffs."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
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


CENT = Decimal("0.01")


def money_text(value: Decimal | None) -> str:
    """An amount of money as people read it: to the cent (half up, as statements round),
    thousands separated by ",", a "-" before a negative amount; "—" for None (not rated):
    ``Decimal("15837.09")`` → ``"15,837.09"``, ``Decimal("-6")`` → ``"-6.00"``. For pages,
    e-mails and notification texts only: the API, CSV exports and metrics keep plain decimals."""
    if value is None:
        return "—"
    cents = Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)
    if not cents:
        cents = abs(cents)  # -0.004 rounds to zero, not to "-0.00"
    return f"{cents:,.2f}"


def number_text(value: Decimal | None) -> str:
    """A decimal number (GPU-hours, GPU-equivalents) with thousands separated by "," and the
    places it has: ``Decimal("12345.678")`` → ``"12,345.678"``; "—" for None."""
    if value is None:
        return "—"
    return f"{Decimal(value):,f}"


# CPU as people write it: "4", "4 cores", "0.5", "500m" (millicores). Memory: "32 GiB", "32Gi",
# "32G" (read as GiB), "512 MiB", "512Mi", or a bare number of GiB.
_CPU = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(m|cores?|cpus?)?", re.IGNORECASE)
_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(gib|gi|gb|g|mib|mi|mb|m)?", re.IGNORECASE)


def parse_cpu_millicores(value: Any) -> int:
    """``"4"``, ``"4 cores"``, ``"0.5"`` or ``"500m"`` → millicores (4000, 4000, 500, 500).
    Raises ValueError with a message for people."""
    match = _CPU.fullmatch(str(value).strip())
    if not match:
        raise ValueError(f"{str(value)[:40]!r} is not a CPU amount like '4' (cores) or '500m'")
    number, unit = Decimal(match[1]), (match[2] or "").lower()
    millicores = number if unit == "m" else number * 1000
    if millicores != millicores.to_integral_value():
        raise ValueError(f"{value} is finer than a millicore")
    return int(millicores)


def parse_memory_mib(value: Any) -> int:
    """``"32 GiB"``, ``"32Gi"``, ``"32"`` (GiB), ``"512 MiB"`` or ``"512Mi"`` → MiB.
    Raises ValueError with a message for people."""
    match = _MEMORY.fullmatch(str(value).strip())
    if not match:
        raise ValueError(f"{str(value)[:40]!r} is not a memory amount like '32 GiB' or '512 MiB'")
    number, unit = Decimal(match[1]), (match[2] or "gib").lower()
    mib = number if unit.startswith("m") else number * 1024
    if mib != mib.to_integral_value():
        raise ValueError(f"{value} is finer than a MiB")
    return int(mib)


def format_cpu(millicores: int) -> str:
    """4000 → ``"4 cores"``, 500 → ``"0.5 cores"``, 1000 → ``"1 core"``."""
    cores = format(Decimal(millicores) / 1000, "f").rstrip("0").rstrip(".") or "0"
    return f"{cores} core{'' if cores == '1' else 's'}"


def format_memory(mib: int) -> str:
    """32768 → ``"32 GiB"``, 1536 → ``"1.5 GiB"``, 500 → ``"500 MiB"``."""
    if mib < 1024:
        return f"{mib} MiB"
    gib = format(Decimal(mib) / 1024, "f")
    gib = gib.rstrip("0").rstrip(".") if "." in gib else gib
    return f"{gib} GiB" if len(gib) <= 7 else f"{mib:,} MiB"


def format_relative(value: datetime, now: datetime) -> str:
    """How far ``value`` is from ``now``, as people say it: ``"in 12 min"``, ``"3 h ago"``,
    ``"just now"``, ``"in 2 d"``."""
    seconds = (value - now).total_seconds()
    size = abs(seconds)
    if size < 45:
        return "just now" if seconds <= 0 else "in under a minute"
    if size < 90 * 60:
        text = f"{max(1, round(size / 60))} min"
    elif size < 36 * 3600:
        hours = size / 3600
        text = f"{hours:.1f} h".replace(".0 h", " h") if hours < 10 else f"{round(hours)} h"
    else:
        text = f"{round(size / 86400)} d"
    return f"in {text}" if seconds > 0 else f"{text} ago"


PREEMPTION_WORDS = {
    "never": "never preempted",
    "graceful": "graceful preemption",
    "preemptible": "preemptible",
}


def format_alternative(
    *,
    queue: str,
    capability: str,
    preemption: str,
    same_queue: bool,
    same_capability: bool,
    sharing: str = "",
) -> str:
    """What following a suggestion changes, in a sentence: ``"same job, queue batch
    (preemptible)"``, ``"same job with capability class fp8"``."""
    parts = []
    if not same_queue:
        terms = PREEMPTION_WORDS.get(preemption, preemption)
        parts.append(f"queue {queue} ({terms})")
    if not same_capability:
        parts.append(f"capability class {capability}")
    text = "same job, " + " and ".join(parts) if parts else "same job"
    if sharing == "exclusive":
        text += ", on whole GPUs instead of time-slices"
    return text


def format_shape(
    *, pods: int, per_pod: int, mig_profile: str = "", time_sliced: bool = False
) -> str:
    """A job's shape in words: ``"2 pods × 8 GPUs"``, ``"1 pod × 1 1g.10gb slice"``,
    ``"1 pod × 1 time-slice of a GPU"``."""
    if mig_profile:
        unit = f"{mig_profile} slice" + ("s" if per_pod != 1 else "")
    elif time_sliced:
        unit = "time-slice" + ("s" if per_pod != 1 else "") + " of a GPU"
    else:
        unit = "GPU" + ("s" if per_pod != 1 else "")
    return f"{pods} pod{'s' if pods != 1 else ''} × {per_pod} {unit}"


# A pending reason's code in a few plain words, where its full message is not shown (another
# team's job): the codes stay API (concepts.md); these are for people.
REASON_WORDS = {
    "NoMatchingGpuClass": "no GPU class of the queue fits",
    "MigProfileUnavailable": "no MIG slice of that size free",
    "QuotaExceeded": "team quota used up",
    "UserLimit": "per-user limit reached",
    "InsufficientCapacity": "not enough free GPUs",
    "ReservedCapacity": "free GPUs are reserved",
    "Fragmentation": "free GPUs too scattered",
    "Topology": "placement cannot be met",
    "Unhealthy": "only unhealthy GPUs match",
    "Maintenance": "matching GPUs in maintenance",
    "Priority": "other jobs are ahead",
    "ReservationWindow": "reservation not started",
    "ClusterUnschedulable": "the cluster cannot place it",
    "ContainerConfigError": "a Secret it needs is missing",
    "ClusterUnreachable": "cluster unreachable",
    "NeverFits": "can never fit",
    "Provisioning": "waiting for a new node",
}


def reason_words(code: str) -> str:
    return REASON_WORDS.get(code, code)


def format_free_devices(*, gpus: int, slices: dict[str, int], replicas: int, per_gpu: int) -> str:
    """Free devices as people count them: ``"7 GPUs + 3 × 1g.10gb slices"``, ``"13
    time-slices (4 per GPU)"``, ``"none"``."""
    parts = []
    if gpus:
        parts.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
    for profile, n in slices.items():
        parts.append(f"{n} × {profile} slice{'s' if n != 1 else ''}")
    if replicas:
        parts.append(f"{replicas} time-slice{'s' if replicas != 1 else ''} ({per_gpu} per GPU)")
    return " + ".join(parts) or "none"


HIDDEN_CHARACTERS = "must not contain control or invisible formatting characters"


def has_hidden_characters(text: str, *, line_breaks: bool = False) -> bool:
    """Whether ``text`` holds control characters or invisible formatting ones (bidirectional
    overrides and zero-width characters among them), which would make a name, a command or a
    justification read differently from what it is. ``line_breaks`` lets tabs and line breaks
    through (text written on several lines)."""
    allowed = "\t\n\r" if line_breaks else ""
    return any(unicodedata.category(c) in ("Cc", "Cf") and c not in allowed for c in text)


NOT_ASCII_NUMBER = "write the number in ASCII digits (0-9)"


def is_ascii_number_text(text: str) -> bool:
    """Whether a number written as text uses only ASCII: Python reads "１" (fullwidth) and "١"
    (Arabic-Indic) as 1, which a person reviewing the request would not see as digits."""
    return text.isascii()
