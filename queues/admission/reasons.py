"""Pending reason codes and the structured reason a waiting job carries.

The codes are API (stored, filtered on, shown in the UI); messages are for people and carry the
numbers; ``details`` carries the same numbers as plain JSON values; ``hint`` says what the user can
do, or is empty when nothing real can be proposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any


class ReasonCode(StrEnum):
    """Why a pending or admitted job is not running (docs/concepts.md, "Why a job waits")."""

    NO_MATCHING_GPU_CLASS = "NoMatchingGpuClass"
    MIG_PROFILE_UNAVAILABLE = "MigProfileUnavailable"
    QUOTA_EXCEEDED = "QuotaExceeded"
    USER_LIMIT = "UserLimit"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    RESERVED_CAPACITY = "ReservedCapacity"
    FRAGMENTATION = "Fragmentation"
    TOPOLOGY = "Topology"
    UNHEALTHY = "Unhealthy"
    MAINTENANCE = "Maintenance"
    PRIORITY = "Priority"
    RESERVATION_WINDOW = "ReservationWindow"
    CLUSTER_UNSCHEDULABLE = "ClusterUnschedulable"
    # Admitted, but the kubelet cannot configure its containers (CreateContainerConfigError):
    # a Secret or key its environment references is missing.
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    CLUSTER_UNREACHABLE = "ClusterUnreachable"
    NEVER_FITS = "NeverFits"
    # Fits only on a node not there yet: one a node pool's provisioner is adding for it.
    PROVISIONING = "Provisioning"


@dataclass(frozen=True, slots=True)
class PendingReason:
    """One reason a job waits. ``details`` holds only JSON-able values (str, int, float, bool,
    None, lists and dicts of those)."""

    code: ReasonCode
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "message": self.message,
            "details": dict(self.details),
            "hint": self.hint,
        }


def span_text(span: timedelta) -> str:
    """A grace or a wait as people say it: ``30 s``, ``5 min``, ``1 h 30 min``."""
    seconds = int(span.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def ready_in_text(left: timedelta) -> str:
    """``in about 6 min``, or ``in under a minute`` when less than a minute is left."""
    return f"in about {span_text(left)}" if left >= timedelta(minutes=1) else "in under a minute"


def time_text(when: datetime) -> str:
    """``2025-03-04 14:30 UTC``: always with the date, since a reason is read later and
    elsewhere than it was written (pages show it in the viewer's time zone, see the ``times``
    template filter)."""
    # naive: UTC
    utc = when if when.tzinfo is None or when.tzinfo is UTC else when.astimezone(UTC)
    # (formatted by hand: half the cost of strftime, and a plan writes one per waiting job)
    return f"{utc.year}-{utc.month:02d}-{utc.day:02d} {utc.hour:02d}:{utc.minute:02d} UTC"


class TimeTexts:
    """``time_text`` of many times near ``near`` (naive or aware as it is), each minute's
    formatted once: a plan writes one per waiting job, and tens of thousands share a few
    thousand minutes."""

    def __init__(self, near: datetime) -> None:
        utc = near if near.tzinfo is None else near.astimezone(UTC)  # a minute of UTC's
        self.base = utc.replace(second=0, microsecond=0)
        self.texts: dict[int, str] = {}

    def __call__(self, when: datetime) -> str:
        minute = (when - self.base) // _MINUTE
        text = self.texts.get(minute)
        if text is None:
            text = self.texts[minute] = time_text(when)
        return text


_MINUTE = timedelta(minutes=1)
