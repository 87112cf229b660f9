"""Run the simulated cluster without Django: ``python -m queues.cluster.sim --nodes FILE``."""

from __future__ import annotations

import argparse
import sys

from queues.cluster.sim.run import DEFAULT_PORT, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m queues.cluster.sim", description=__doc__)
    parser.add_argument(
        "--nodes", required=True, help="cluster file (YAML), e.g. examples/cluster.yaml"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--speed", type=float, default=1.0, help="simulated seconds per real second"
    )
    parser.add_argument(
        "--kubeconfig", default="var/sim/kubeconfig", help="where to write the kubeconfig"
    )
    options = parser.parse_args(argv)
    return run(
        nodes=options.nodes,
        host=options.host,
        port=options.port,
        speed=options.speed,
        kubeconfig=options.kubeconfig,
        out=sys.stdout,
    )


if __name__ == "__main__":
    sys.exit(main())
