"""Coalescing triggers: whatever asks for a cycle, at most one runs at a time and requests made
while it runs collapse into one follow-up.

The worker's mirror calls ``Coalescer.request`` from its watch threads every time the cluster
reports something that frees or moves GPUs (a Job ended, a pod went); a burst of hundreds of such
events costs one call of ``run`` while one is under way, and one more after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Coalescer:
    """Calls ``run`` in a thread of its own whenever ``request`` was called since ``run`` last
    started; never two ``run`` at once. ``run`` raising is logged and does not stop it."""

    def __init__(
        self,
        run: Callable[[], object],
        *,
        name: str = "coalescer",
        done: Callable[[], object] | None = None,
    ) -> None:
        self._run = run
        self._done = done  # called in the thread when it stops (to close what it opened)
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self.runs = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Coalescer:
        self._thread.start()
        return self

    def request(self) -> None:
        self._wanted.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wanted.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopping.is_set():
                if self._done is not None:
                    self._done()
                return
            # Cleared before running: a request that arrives during the run is the follow-up.
            self._wanted.clear()
            try:
                self._run()
            except Exception:
                logger.exception("%s: run failed", self._thread.name)
            self.runs += 1
