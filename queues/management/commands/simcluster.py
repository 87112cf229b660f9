"""``manage.py simcluster``: run the simulated Kubernetes cluster in the foreground."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from queues.cluster.sim.nodes import NodeFileError
from queues.cluster.sim.run import DEFAULT_PORT, run


class Command(BaseCommand):
    help = (
        "Run the simulated GPU cluster (a small Kubernetes API server) until Ctrl-C, and write a "
        "kubeconfig for it (default: settings.CLUSTER_KUBECONFIG). See docs/simulated-cluster.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--nodes", required=True, help="cluster file, e.g. examples/cluster.yaml"
        )
        parser.add_argument(
            "--port",
            type=int,
            default=DEFAULT_PORT,
            help=f"port to listen on (default {DEFAULT_PORT}, or a free one if taken; 0: any free)",
        )
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument(
            "--speed",
            type=float,
            default=1.0,
            help="simulated seconds per real second (60: a demo hour passes in a minute)",
        )
        parser.add_argument("--kubeconfig", default=None, help="where to write the kubeconfig")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["speed"] <= 0:
            raise CommandError("--speed must be positive")
        kubeconfig = options["kubeconfig"] or settings.CLUSTER_KUBECONFIG
        try:
            run(
                nodes=options["nodes"],
                host=options["host"],
                port=options["port"],
                speed=options["speed"],
                kubeconfig=kubeconfig,
                out=self.stdout,
            )
        except (NodeFileError, OSError) as error:
            raise CommandError(str(error)) from error
