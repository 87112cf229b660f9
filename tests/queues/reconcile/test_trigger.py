"""Coalescing: whatever asks for a cycle, one runs at a time and requests made meanwhile
collapse into one follow-up."""

from __future__ import annotations

import threading
import time

from queues.reconcile.trigger import Coalescer


def test_requests_during_a_run_collapse_into_one_follow_up_and_runs_never_overlap():
    running = threading.Event()
    release = threading.Event()
    overlaps = []
    active = [0]

    def run():
        active[0] += 1
        overlaps.append(active[0])
        running.set()
        release.wait(5)
        active[0] -= 1

    coalescer = Coalescer(run, name="test-coalescer").start()
    try:
        coalescer.request()
        assert running.wait(5)
        for _ in range(50):  # a burst while the first run is under way
            coalescer.request()
        release.set()
        deadline = time.monotonic() + 5
        while coalescer.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert coalescer.runs == 2  # the first, and one follow-up for the whole burst
        assert overlaps == [1, 1]
    finally:
        coalescer.stop()


def test_a_run_that_fails_does_not_stop_the_next():
    calls = []

    def run():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the broker is away")

    coalescer = Coalescer(run, name="test-coalescer").start()
    try:
        coalescer.request()
        deadline = time.monotonic() + 5
        while coalescer.runs < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        coalescer.request()
        while coalescer.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) == 2
    finally:
        coalescer.stop()
