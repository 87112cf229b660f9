"""The ``sim_cluster`` pytest fixture: a simulated cluster over real HTTP, for any test.

Import the fixtures into a ``conftest.py`` to use them::

    from tests.sim import sim_cluster, sim_cluster_factory  # noqa: F401

``sim_cluster`` serves ``examples/cluster.yaml`` on a free port with a manual clock (time stands
still until the test calls :meth:`SimClusterHandle.advance`) and speed 1, writes a kubeconfig into
``tmp_path`` and stops the server afterwards. ``sim_cluster_factory(nodes=…, speed=…, …)`` makes
others (a smaller cluster, a short watch history, …).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from simcluster import (
    ManualClock,
    RequestFault,
    SimCluster,
    SimServer,
    load_cluster_file,
    parse_cluster,
)

EXAMPLE_CLUSTER = Path(__file__).resolve().parent.parent / "examples" / "cluster.yaml"


@dataclass
class SimClusterHandle:
    """A running simulated cluster: how to reach it, how to move its time, how to break it."""

    server: SimServer
    cluster: SimCluster
    kubeconfig: Path
    _clients: list[client.ApiClient] = field(default_factory=list, repr=False)

    @property
    def url(self) -> str:
        return self.server.url

    # --- clients --------------------------------------------------------------------------------

    def api_client(self) -> client.ApiClient:
        """A new official ``ApiClient`` loaded from the kubeconfig (closed at teardown)."""
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(api)
        return api

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client())

    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client())

    # --- time -----------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The cluster's clock (aware UTC)."""
        return self.cluster.now()

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward and play all that happens meanwhile. Durations in
        pods are simulated seconds, so at speed ``s`` a pod of D seconds needs ``advance(D / s)``."""
        self.cluster.advance(seconds)

    # --- faults ---------------------------------------------------------------------------------

    def fail_requests(
        self,
        count: int = 1,
        *,
        status: int = 500,
        method: str | None = None,
        path: str | None = None,
        watch: bool | None = None,
        message: str = "",
    ) -> None:
        """The next ``count`` API requests matching ``method``/``path`` (a regex searched in the
        URL path) answer ``status`` with a Kubernetes Status (500 InternalError by default;
        403 Forbidden, 429, 503 … also work)."""
        self.cluster.faults.add(
            RequestFault(
                count=count, status=status, method=method, path=path, watch=watch, message=message
            )
        )

    def delay_requests(
        self,
        seconds: float,
        count: int = 1,
        *,
        method: str | None = None,
        path: str | None = None,
        after: bool = False,
    ) -> None:
        """The next ``count`` matching requests answer ``seconds`` (real time) late, to trip a
        client's timeout. With ``after=True`` the request takes effect first: the client times
        out without knowing it succeeded."""
        self.cluster.faults.add(
            RequestFault(
                count=count,
                status=None,
                delay_seconds=seconds,
                method=method,
                path=path,
                after=after,
            )
        )

    def gone_next_watch(self, count: int = 1) -> None:
        """The next ``count`` watch requests end at once with an ERROR event: 410 Expired."""
        self.cluster.faults.arm_gone_watches(count)

    def expire_watches(self) -> None:
        """Compact the watch history: resuming from any resourceVersion seen so far gets 410."""
        self.cluster.expire_watches()

    def node_unhealthy(self, node: str, **options: Any) -> dict[str, Any]:
        """The node's GPUs turn unhealthy (condition GPUHealthy=False, label
        ``nvidia.com/gpu.health``; options: reason, message, label_value, taint)."""
        return self.cluster.set_node_health(node, healthy=False, **options)

    def node_healthy(self, node: str, **options: Any) -> dict[str, Any]:
        return self.cluster.set_node_health(node, healthy=True, **options)

    def fail_image_pulls(self, pattern: str) -> None:
        """Images whose reference contains ``pattern`` fail to pull (ErrImagePull, then
        ImagePullBackOff). Any image containing ``does-not-exist`` always fails."""
        self.cluster.faults.fail_image_pulls(pattern)

    def oom_kill(self, namespace: str, pod: str) -> dict[str, Any]:
        """Kill the running pod for memory now: terminated, reason OOMKilled, exit code 137."""
        return self.cluster.oom_kill(namespace, pod)

    def delete_job_out_of_band(
        self, namespace: str, name: str, propagation: str = "Background"
    ) -> None:
        """Delete a Job as ``kubectl delete job`` would (its pods go too, gracefully)."""
        self.cluster.delete_job(namespace, name, propagation=propagation)

    def create_foreign_pod(self, **options: Any) -> dict[str, Any]:
        """A GPU pod created outside the portal (no portal labels); options: gpus, resource,
        node, namespace, name, duration_seconds (default: holds its GPUs until deleted)."""
        return self.cluster.create_foreign_pod(**options)

    def clear_faults(self) -> None:
        self.cluster.faults.clear()

    def stop_server(self) -> None:
        """The API server goes away (connections cut, watches ended); the cluster itself, its
        pods and its clock go on, as when a control plane restarts."""
        self.server.stop()

    def start_server(self, *, token: str | None = None) -> None:
        """The API server is back on the same address with the same state, and the same token
        unless ``token`` says otherwise."""
        old = self.server
        self.server = SimServer(
            self.cluster,
            port=old.port,
            token=token or old.token,
            tick_interval=None,
            bookmark_interval=old.bookmark_interval,
            tls=old.tls,
        ).start()

    def rotate_token(self, token: str, *, kubeconfig: bool = True) -> None:
        """The API server restarts wanting a new token (same address, same state); with
        ``kubeconfig`` the kubeconfig is rewritten with it, as a renewed one would be."""
        self.stop_server()
        self.start_server(token=token)
        if kubeconfig:
            self.server.write_kubeconfig(self.kubeconfig)

    def close(self) -> None:
        for api in self._clients:
            api.close()
        self.server.stop()


SimClusterFactory = Callable[..., SimClusterHandle]


@pytest.fixture
def sim_cluster_factory(tmp_path: Path) -> Iterator[SimClusterFactory]:
    """Start simulated clusters on free ports; all are stopped at teardown.

    ``nodes`` is a cluster file path, or the parsed YAML of one (a dict); ``speed`` scales
    simulated durations; ``history_size`` bounds the watch history; ``bookmark_interval`` is
    the real seconds between bookmarks of an idle watch. The clock is manual.
    """
    handles: list[SimClusterHandle] = []

    def start(
        *,
        nodes: str | Path | dict[str, Any] = EXAMPLE_CLUSTER,
        speed: float = 1.0,
        history_size: int = 10_000,
        bookmark_interval: float = 0.2,
        start: datetime | None = None,
    ) -> SimClusterHandle:
        spec = parse_cluster(nodes) if isinstance(nodes, dict) else load_cluster_file(nodes)
        cluster = SimCluster(spec, clock=ManualClock(start), speed=speed, history_size=history_size)
        server = SimServer(cluster, tick_interval=None, bookmark_interval=bookmark_interval).start()
        kubeconfig = server.write_kubeconfig(tmp_path / f"kubeconfig-{len(handles)}")
        handle = SimClusterHandle(server=server, cluster=cluster, kubeconfig=kubeconfig)
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        handle.close()


@pytest.fixture
def sim_cluster(sim_cluster_factory: SimClusterFactory) -> SimClusterHandle:
    """The example cluster (``examples/cluster.yaml``) at speed 1 on a manual clock."""
    return sim_cluster_factory()


def cluster_yaml(text: str) -> dict[str, Any]:
    """Parse an inline cluster file (for tests that want a few nodes of their own)."""
    return yaml.safe_load(text)
