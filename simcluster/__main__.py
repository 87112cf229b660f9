"""Run the simulated cluster without Django: ``python -m simcluster --nodes FILE``.

It writes a kubeconfig for it (default ``var/sim/kubeconfig``, where the portal's ``sim`` cluster
mode looks) and serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import sys

from simcluster.nodes import NodeFileError
from simcluster.run import DEFAULT_PORT, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simcluster", description=__doc__)
    parser.add_argument(
        "--nodes", required=True, help="cluster file (YAML), e.g. examples/cluster.yaml"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated seconds per real second (60: a simulated hour passes in a minute)",
    )
    parser.add_argument(
        "--kubeconfig", default="var/sim/kubeconfig", help="where to write the kubeconfig"
    )
    options = parser.parse_args(argv)
    if options.speed <= 0:
        parser.error("--speed must be positive")
    try:
        return run(
            nodes=options.nodes,
            host=options.host,
            port=options.port,
            speed=options.speed,
            kubeconfig=options.kubeconfig,
            out=sys.stdout,
        )
    except (NodeFileError, OSError) as error:
        print(f"simcluster: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
