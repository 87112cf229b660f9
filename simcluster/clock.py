"""Clocks for the simulated cluster.

Timestamps the cluster reports are real UTC wall-clock time, so what the portal records is real
time. Simulated *durations* (a pod's run time, a grace period, ``activeDeadlineSeconds``) are
divided by the cluster's speed factor before they are laid on this clock.

:class:`WallClock` follows the system clock (the server); :class:`ManualClock` stands still until
a test moves it with :meth:`ManualClock.advance`, which makes the simulation deterministic.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the simulation needs from time: an aware UTC ``now`` that never goes backwards."""

    def now(self) -> datetime: ...

    def advance(self, seconds: float) -> None: ...


class WallClock:
    """The system clock, optionally shifted forward by :meth:`advance` (to skip ahead in a demo)."""

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def advance(self, seconds: float) -> None:
        """Jump ahead: later timestamps are ``seconds`` further in the future than real time."""
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._offset += timedelta(seconds=seconds)


class ManualClock:
    """A clock that moves only when told: tests advance it and the simulation follows exactly.

    It starts at ``start`` (default: the real time now, whole seconds), so timestamps stay
    plausible real UTC times.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime.now(UTC).replace(microsecond=0)
        if start.tzinfo is None:
            raise ValueError("the clock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._now += timedelta(seconds=seconds)


def rfc3339(moment: datetime) -> str:
    """Kubernetes' ``metav1.Time`` form: UTC, whole seconds, ``Z`` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """Kubernetes' ``metav1.MicroTime`` form (events' ``eventTime``), and log timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
