"""How the client writes what the API answers for people: tables, times, durations, reasons."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

DASH = "—"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart, headers in capitals; numbers right-aligned."""
    cells = [[DASH if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        any(row[i] != DASH for row in cells) and all(_numeric(row[i]) for row in cells)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(row) for row in cells)])


def _numeric(text: str) -> bool:
    return text == DASH or text.replace(".", "", 1).replace(",", "").lstrip("-").isdigit()


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def when(value: str | None) -> str:
    """An API time as people read it: ``2026-12-05 14:00 UTC``."""
    moment = parse_time(value)
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else DASH


def duration(seconds: float | None) -> str:
    """``5400`` → ``1h30m``; under a minute ``45s``; None → a dash."""
    if seconds is None:
        return DASH
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def devices(job: dict[str, Any]) -> str:
    """``2 pods × 4`` or ``4`` (of the job's GPU kind)."""
    per_pod = job["gpus_per_pod"]
    kind = job.get("mig_profile") or "GPU"
    noun = kind if kind != "GPU" else ("GPU" if per_pod == 1 else "GPUs")
    if job["pods"] == 1:
        return f"{per_pod} {noun}"
    return f"{job['pods']} pods × {per_pod} {noun}"


def estimate(job: dict[str, Any]) -> str:
    """A pending job's estimated start as the job page says it."""
    latest = job.get("estimated_start")
    if not latest:
        return job.get("estimated_start_note") or "being computed by the next reconcile"
    likely, low, high = (
        job.get("likely_start"),
        job.get("start_range_low"),
        job.get("start_range_high"),
    )
    note = job.get("estimated_start_note")
    told = f"at the latest {when(latest)}" + (f" ({note})" if note else "")
    if likely and likely != latest:
        return f"likely {when(likely)} ({when(low)} – {when(high)}), {told}"
    return told


def standing(job: dict[str, Any]) -> str:
    """State and position in a few words: ``pending, 2nd of 5``; ``running since …``."""
    state = job["state"]
    if job.get("terminating"):
        state += " (terminating)"
    if job["state"] == "pending" and job.get("position"):
        return f"{state}, {ordinal(job['position'])} of {job.get('queue_length') or '?'} waiting"
    if job["state"] == "running" and job.get("started_at"):
        return f"{state} since {when(job['started_at'])}"
    if job.get("finished_at") and job["state"] in ("succeeded", "failed", "cancelled"):
        return f"{state} at {when(job['finished_at'])}"
    return state


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def numbers(details: dict[str, Any]) -> str:
    """A reason's numbers as ``free=0, requested=4``."""
    return ", ".join(f"{k}={_plain(v)}" for k, v in details.items())


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + numbers(value) + "}"
    return str(value)
