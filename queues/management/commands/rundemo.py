"""``manage.py rundemo``: the whole product on one machine until Ctrl-C.

Starts the simulated cluster (at real speed), a Celery worker with beat (which reconciles every
few seconds), the web server and a load generator that keeps the queues busy
(``demo_load``); stops all of them on Ctrl-C or when one of them dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run the simulated cluster, a Celery worker with beat and the web server together."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="web server address")
        parser.add_argument("--nodes", default="examples/cluster.yaml", help="cluster file")
        # Real speed: the portal's clock, estimates, runtime limits and costs are real time, so
        # the cluster's must be too (the demo's jobs are minutes long instead).
        parser.add_argument("--speed", type=float, default=1.0, help="simulated s per real s")
        parser.add_argument(
            "--load-interval",
            type=float,
            default=20.0,
            help="seconds between the load generator's rounds (0: no load generator)",
        )
        parser.add_argument("--sim-port", type=int, default=0, help="simulated cluster port")

    def handle(
        self,
        *args: Any,
        addr: str,
        nodes: str,
        speed: float,
        sim_port: int,
        load_interval: float,
        **options: Any,
    ) -> None:
        python = sys.executable
        kubeconfig = Path(settings.CLUSTER_KUBECONFIG)
        kubeconfig.unlink(missing_ok=True)
        processes: list[tuple[str, subprocess.Popen[bytes]]] = []

        def start(name: str, command: list[str], env: dict[str, str] | None = None) -> None:
            processes.append((name, subprocess.Popen(command, env=env)))

        start(
            "simulated cluster",
            [
                python,
                "-m",
                "simcluster",
                "--nodes",
                nodes,
                "--speed",
                str(speed),
                "--port",
                str(sim_port),
                "--kubeconfig",
                str(kubeconfig),
            ],
        )
        deadline = time.monotonic() + 30
        while not kubeconfig.exists():
            if time.monotonic() > deadline or processes[0][1].poll() is not None:
                self._stop(processes)
                raise SystemExit("the simulated cluster did not start")
            time.sleep(0.2)
        # The duty-cycle panels (web) and counters (the worker's beat) read the simulated
        # cluster's DCGM series unless told otherwise.
        web_env = dict(os.environ)
        if not settings.PROMETHEUS_URL:
            server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
            web_env["PROMETHEUS_URL"] = f"{server.rstrip('/')}/prometheus"
        start(
            "worker",
            [
                python,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--beat",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--schedule",
                str(Path(settings.VAR_DIR) / "celerybeat-schedule"),
            ],
            env=web_env,
        )
        start("web", [python, "manage.py", "runserver", "--noreload", addr], env=web_env)
        if load_interval > 0:
            start(
                "load generator",
                [python, "manage.py", "demo_load", "--interval", str(load_interval)],
            )
        self.stdout.write(f"GPU Portal on http://{addr}/ — Ctrl-C stops everything")
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            while all(p.poll() is None for _, p in processes):
                time.sleep(0.5)
            dead = next(name for name, p in processes if p.poll() is not None)
            self.stderr.write(f"{dead} stopped; stopping the rest")
        except KeyboardInterrupt:
            pass
        finally:
            self._stop(processes)

    def _stop(self, processes: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
        for _, process in processes:
            if process.poll() is None:
                process.terminate()
        for _, process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
