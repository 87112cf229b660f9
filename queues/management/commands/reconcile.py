from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from queues.cluster.adapter import cluster_from_settings
from queues.cluster.mirror import ClusterMirror
from queues.reconcile.cycle import reconcile_cycle


class Command(BaseCommand):
    help = (
        "Reconcile the portal with the cluster: one cycle with --once (listing the cluster), "
        "else following the cluster through watches: a cycle as soon as GPUs are given back "
        "(a Job ended, a pod went), and every --interval seconds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="run one cycle and exit")
        parser.add_argument(
            "--interval", type=float, default=5.0, help="seconds between cycles at most"
        )

    def handle(self, *args: Any, once: bool, interval: float, **options: Any) -> None:
        cluster = cluster_from_settings()
        # Set by the watches when GPUs are given back; cleared before each cycle, so what
        # happens during one asks for exactly one more.
        freed = threading.Event()
        mirror = None if once else ClusterMirror(cluster, on_freed=freed.set).start()
        if mirror is not None:
            mirror.wait_synced()
        try:
            while True:
                freed.clear()
                report = reconcile_cycle(
                    cluster=cluster, holder="manage.py reconcile", mirror=mirror
                )
                self.stdout.write(report.summary())
                if once:
                    return
                freed.wait(interval)
        finally:
            if mirror is not None:
                mirror.stop()
            cluster.close()
