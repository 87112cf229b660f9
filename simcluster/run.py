"""Starting the simulated cluster in the foreground (for ``python -m simcluster``)."""

from __future__ import annotations

import errno
import logging
import signal
import threading
from pathlib import Path
from typing import TextIO

from simcluster.cluster import SimCluster
from simcluster.server import SimServer

DEFAULT_PORT = 6443
logger = logging.getLogger(__name__)


def start_server(
    *, nodes: str | Path, host: str, port: int, speed: float, kubeconfig: str | Path
) -> tuple[SimServer, Path]:
    """Load the nodes, bind the port (the default port falls back to a free one if taken) and
    write the kubeconfig. The server is not serving yet."""
    cluster = SimCluster.from_file(nodes, speed=speed)
    try:
        server = SimServer(cluster, host=host, port=port)
    except OSError as error:
        if error.errno != errno.EADDRINUSE or port != DEFAULT_PORT:
            raise
        logger.warning("port %s is taken; using a free port", port)
        server = SimServer(cluster, host=host, port=0)
    return server, server.write_kubeconfig(kubeconfig)


def run(
    *, nodes: str | Path, host: str, port: int, speed: float, kubeconfig: str | Path, out: TextIO
) -> int:
    """Serve until Ctrl-C; prints the URL and the kubeconfig path first."""
    server, path = start_server(
        nodes=nodes, host=host, port=port, speed=speed, kubeconfig=kubeconfig
    )
    out.write(
        f"Simulated cluster at {server.url} (speed {speed:g}x, "
        f"{server.cluster.store.count('nodes')} nodes)\n"
        f"kubeconfig: {path.resolve()}\n"
        "Press Ctrl-C to stop.\n"
    )
    out.flush()
    _stop_on_sigterm()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    out.write("Simulated cluster stopped.\n")
    return 0


def _stop_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C, so that ``make demo`` and process managers stop us cleanly."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
