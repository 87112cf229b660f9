from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from chargeback.demo import seed_history


class Command(BaseCommand):
    help = (
        "Seed the demo's history: three closed months and this month so far of several teams' "
        "usage, through the reconcile's usage pass and the month close (once; nothing when "
        "usage exists). `seed_demo --jobs` runs it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--nodes",
            default=str(Path(settings.BASE_DIR) / "examples" / "cluster.yaml"),
            help="the simulated cluster's file (its nodes hold the history's pods)",
        )

    def handle(self, *args: Any, nodes: str, **options: Any) -> None:
        # (The usage pass logs every interval it opens and closes: thousands here.)
        logger = logging.getLogger("queues.reconcile")
        level = logger.level
        logger.setLevel(logging.WARNING)
        try:
            history = seed_history(now=timezone.now(), cluster_file=Path(nodes))
        finally:
            logger.setLevel(level)
        if not history.months:
            self.stdout.write("demo history: usage exists already, nothing seeded")
            return
        self.stdout.write(
            f"demo history: {history.jobs} jobs, {history.pods} pods from "
            f"{history.months[0]:%Y-%m}; closed {', '.join(f'{m:%Y-%m}' for m in history.months)}"
        )
