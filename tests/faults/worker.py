"""A Celery worker of the portal with beat, as deployed, that can stop dead at a chosen point so
that a test can SIGKILL it there.

``FAULT_PAUSE_AT`` names the point (nothing: run normally):

- ``create_job``: right after the cluster accepted a Job, before the portal noted it;
- ``usage_opened``: right after the usage pass committed newly opened intervals;
- ``usage_closed``: right after the usage pass committed closed intervals.

At the point the worker writes ``FAULT_PAUSE_MARKER`` and sleeps; the test then kills it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from portal.celery import app

PAUSE_AT = os.environ.get("FAULT_PAUSE_AT", "")
MARKER = Path(os.environ.get("FAULT_PAUSE_MARKER", "/nonexistent"))


def pause() -> None:
    MARKER.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


def install_pause() -> None:
    import django

    django.setup()
    import queues.reconcile.cycle as cycle
    from queues.cluster.adapter import Cluster

    if PAUSE_AT == "create_job":
        real_create = Cluster.create_job

        def create_job(self: Cluster, manifest: dict[str, Any]) -> bool:
            created = real_create(self, manifest)
            pause()
            return created

        Cluster.create_job = create_job  # type: ignore[method-assign]
    elif PAUSE_AT in ("usage_opened", "usage_closed"):
        real_usage = cycle.usage_sync

        def usage_sync(view: Any, *, now: Any, report: Any) -> None:
            real_usage(view, now=now, report=report)
            if report.intervals_opened if PAUSE_AT == "usage_opened" else report.intervals_closed:
                pause()

        cycle.usage_sync = usage_sync  # type: ignore[assignment]
    elif PAUSE_AT:
        raise SystemExit(f"FAULT_PAUSE_AT={PAUSE_AT!r}: unknown point")


if __name__ == "__main__":
    if PAUSE_AT:
        install_pause()
    app.worker_main(
        [
            "worker",
            "--pool",
            "solo",
            "--beat",
            "--schedule",
            os.environ["BEAT_SCHEDULE"],
            "--loglevel",
            "INFO",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ]
    )
