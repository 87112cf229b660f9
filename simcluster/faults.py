"""Request-level faults: what the HTTP layer does wrong on purpose.

Faults that change the cluster itself (a node turning unhealthy, an OOM kill, a Job deleted out
of band, a pod someone else created) are operations of
:class:`~simcluster.cluster.SimCluster`; this module holds the ones that affect
*answers*: errors, delays, expired watches, failing image pulls. Faults are consumed in the
order they were injected; ``count`` is how many requests one hits.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from simcluster.errors import REASONS

DEFAULT_FAILING_IMAGE = "does-not-exist"


@dataclass
class RequestFault:
    """The next ``count`` requests matching ``method`` and ``path`` (a regex searched in the URL
    path) fail with ``status``, or — with ``delay_seconds`` — are answered that much later.

    ``watch`` limits the fault to watch requests (True) or to the rest (False). A delay is applied
    before the request is handled unless ``after`` is set: then the request takes effect and only
    its answer is late (the client times out not knowing it succeeded).
    """

    count: int = 1
    status: int | None = 500
    delay_seconds: float = 0.0
    method: str | None = None
    path: str | None = None
    watch: bool | None = None
    after: bool = False
    message: str = ""

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.method and self.method.upper() != method.upper():
            return False
        if self.path and not re.search(self.path, path):
            return False
        return self.watch is None or self.watch == is_watch

    def describe(self) -> str:
        return self.message or (
            f"Internal error occurred: injected fault ({REASONS.get(self.status or 500, 'error')})"
        )


@dataclass
class Faults:
    """The faults armed now; thread-safe, since every request thread consults them."""

    request_faults: list[RequestFault] = field(default_factory=list)
    gone_watches: int = 0
    failing_images: list[str] = field(default_factory=lambda: [DEFAULT_FAILING_IMAGE])
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, fault: RequestFault) -> None:
        if fault.count < 1:
            raise ValueError("a fault needs a count of at least 1")
        with self._lock:
            self.request_faults.append(fault)

    def take(self, method: str, path: str, is_watch: bool) -> RequestFault | None:
        """The first armed fault that matches this request, counted down (None: answer normally)."""
        with self._lock:
            for fault in self.request_faults:
                if fault.matches(method, path, is_watch):
                    fault.count -= 1
                    if fault.count <= 0:
                        self.request_faults.remove(fault)
                    return fault
        return None

    def arm_gone_watches(self, count: int) -> None:
        with self._lock:
            self.gone_watches += count

    def take_gone_watch(self) -> bool:
        with self._lock:
            if self.gone_watches > 0:
                self.gone_watches -= 1
                return True
        return False

    def fail_image_pulls(self, pattern: str) -> None:
        with self._lock:
            self.failing_images.append(pattern)

    def image_fails(self, image: str) -> bool:
        with self._lock:
            return any(pattern in image for pattern in self.failing_images)

    def clear(self) -> None:
        """Disarm everything injected (the built-in failing image name stays)."""
        with self._lock:
            self.request_faults.clear()
            self.gone_watches = 0
            self.failing_images[:] = [DEFAULT_FAILING_IMAGE]
