"""The simulated cluster's HTTP API server: the Kubernetes REST subset, plus ``/sim`` controls.

It speaks exactly what the official ``kubernetes`` client sends: JSON bodies, ``Status`` objects
for errors, ``labelSelector``/``fieldSelector``/``limit``/``continue`` on lists, and watches as a
chunked stream of newline-delimited ``{"type", "object"}`` events (see :meth:`_Handler._watch`).

Served paths (``{ns}`` a namespace)::

    GET    /version  /api  /apis  /api/v1  /apis/batch  /apis/batch/v1
    GET    /api/v1/nodes[/{name}[/status]]            (list, watch, get)
    PATCH  /api/v1/nodes/{name}[/status]              (merge, strategic merge, JSON patch)
    GET    /api/v1/namespaces[/{ns}]    POST /api/v1/namespaces
    GET    /api/v1/pods  /api/v1/namespaces/{ns}/pods[/{name}[/status|/log]]
    POST   /api/v1/namespaces/{ns}/pods     DELETE /api/v1/namespaces/{ns}/pods/{name}
    GET    /api/v1/events  /api/v1/namespaces/{ns}/events[/{name}]
    GET    /api/v1/secrets  /api/v1/namespaces/{ns}/secrets[/{name}]       (list, watch, get)
    POST   /api/v1/namespaces/{ns}/secrets  DELETE /api/v1/namespaces/{ns}/secrets/{name}
    GET    /apis/batch/v1/jobs  /apis/batch/v1/namespaces/{ns}/jobs[/{name}[/status]]
    POST   /apis/batch/v1/namespaces/{ns}/jobs   DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}
    GET    /apis/autoscaling.x-k8s.io/v1/provisioningrequests
           /apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests[/{name}]
    POST   /apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests
    DELETE /apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests/{name}

The side API for people and out-of-process tests (same bearer token)::

    GET    /prometheus/api/v1/query[_range]   DCGM_FI_DEV_GPU_UTIL per pod (simcluster.prometheus)
    GET    /dcgm/metrics               the same series as the DCGM exporter serves them (no token)
    GET    /sim/state                  time, speed, GPU use per node, pods per phase
    POST   /sim/clock  {"advance": s}  move the clock forward s seconds
    POST   /sim/faults {"kind": …}     inject a fault (see docs/simulated-cluster.md)
    DELETE /sim/faults                 disarm request faults
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from simcluster import prometheus
from simcluster.cluster import SimCluster
from simcluster.errors import ApiError, bad_request, failure_status
from simcluster.faults import RequestFault
from simcluster.kubeconfig import write_kubeconfig
from simcluster.objects import parse_deletion
from simcluster.resources import RESOURCES, Resource
from simcluster.selectors import (
    FieldSelector,
    LabelSelector,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from simcluster.store import Change, Expired

logger = logging.getLogger(__name__)

PROVISIONING_GROUP = "autoscaling.x-k8s.io"
KUBERNETES_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-gpuportal-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "compiler": "gc",
}
DEFAULT_WATCH_SECONDS = 1800
_WAIT_SLICE = 0.25  # how often a waiting watch checks for shutdown and its deadline


@dataclass
class Response:
    code: int
    body: Any
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class SimServer:
    """Serves a :class:`SimCluster` over HTTP on ``host:port`` (port 0: any free port).

    ``tick_interval`` (real seconds) runs a background ticker that keeps the simulation up with
    its clock; ``None`` leaves time to whoever calls ``cluster.tick()``/``advance()`` (tests).
    Watches without events send a BOOKMARK every ``bookmark_interval`` real seconds, if asked.
    ``tls`` (a certificate file and its key) serves HTTPS instead, as a real API server does (a
    pod's in-cluster client only speaks HTTPS).
    """

    def __init__(
        self,
        cluster: SimCluster,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tick_interval: float | None = 0.05,
        bookmark_interval: float = 5.0,
        tls: tuple[str | Path, str | Path] | None = None,
    ) -> None:
        self.cluster = cluster
        self.token = token or secrets.token_urlsafe(24)
        self.tick_interval = tick_interval
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        # API requests served, by kind ("read", "write", "watch"): what a client cost the
        # control plane (GET /sim/state reports them; /sim requests are not counted).
        self.requests: dict[str, int] = {"read": 0, "write": 0, "watch": 0}
        self._requests_lock = threading.Lock()
        self._httpd = _HttpServer((host, port), _Handler, self)
        self.tls = tls
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._threads: list[threading.Thread] = []
        self._serving = False

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def count_request(self, kind: str) -> None:
        with self._requests_lock:
            self.requests[kind] += 1

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server (its URL and token) to ``path``."""
        return write_kubeconfig(path, self.url, self.token)

    def start(self) -> SimServer:
        """Serve (and tick) in background threads; returns at once."""
        self._serving = True
        self._spawn(lambda: self._httpd.serve_forever(poll_interval=0.05), "simcluster-http")
        if self.tick_interval is not None:
            self._spawn(self._tick_forever, "simcluster-ticker")
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` (or Ctrl-C in the caller)."""
        self._serving = True
        if self.tick_interval is not None:
            self._spawn(self._tick_forever, "simcluster-ticker")
        self._httpd.serve_forever(poll_interval=0.1)

    def stop(self) -> None:
        """Stop serving: end open watches, close client connections, join the threads."""
        self.stopping.set()
        with self.cluster.store.changed:
            self.cluster.store.changed.notify_all()
        if self._serving:  # shutdown() would wait forever for a loop that never ran
            self._httpd.shutdown()
        self._httpd.close_connections()
        self._httpd.server_close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _tick_forever(self) -> None:
        assert self.tick_interval is not None
        while not self.stopping.wait(self.tick_interval):
            try:
                self.cluster.tick()
            except Exception:  # a bug in one tick must not stop time for good
                logger.exception("simulated cluster tick failed")


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, sim: SimServer) -> None:
        self.sim = sim
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Unblock handler threads waiting on idle keep-alive connections."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer
    # An answer leaves in one write (headers and body buffered, then flushed) on a socket without
    # Nagle's algorithm, as Go's net/http serves. http.server's default, unbuffered writes with
    # Nagle on, sent the headers, then held the body back until the client acknowledged them,
    # which it delays by up to 40 ms: every request cost ~40 ms whatever the work.
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client hung up; nothing is left to answer

    def finish(self) -> None:
        # Buffered output the client will never read must not fail the connection's end.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().finish()
        self.rfile.close()

    # http.server calls do_<METHOD>.
    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    @property
    def sim(self) -> SimServer:
        return self.server.sim

    @property
    def cluster(self) -> SimCluster:
        return self.server.sim.cluster

    # --- dispatch ------------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {
            key: values[-1] for key, values in parse_qs(split.query, keep_blank_values=True).items()
        }
        body_bytes = self._read_body()
        try:
            if path.startswith("/prometheus/") and method == "GET":
                # The simulated DCGM exporter's Prometheus: no token, as Prometheus has none.
                status, answer = prometheus.answer(
                    self.cluster, path.removeprefix("/prometheus"), query
                )
                self._send(Response(status, answer))
                return
            if path == "/dcgm/metrics" and method == "GET":
                # The simulated DCGM exporter itself, for a real Prometheus: no token either.
                self._send(
                    Response(
                        200,
                        prometheus.exposition(self.cluster),
                        "text/plain; version=0.0.4; charset=utf-8",
                    )
                )
                return
            if not self._authorized():
                raise ApiError(401, "Unauthorized")
            if path.startswith("/sim"):
                self._send(self._sim_api(method, path, body_bytes))
                return
            is_watch = method == "GET" and query.get("watch") in ("true", "1")
            self.sim.count_request("watch" if is_watch else "read" if method == "GET" else "write")
            fault = self.cluster.faults.take(method, path, is_watch)
            if fault is not None and fault.delay_seconds and not fault.after:
                time.sleep(fault.delay_seconds)
            if fault is not None and fault.status:
                raise ApiError(fault.status, fault.describe())
            if is_watch:
                self._watch(path, query)
                return
            response = self._route(method, path, query, body_bytes)
            if fault is not None and fault.after and fault.delay_seconds:
                time.sleep(fault.delay_seconds)
            self._send(response)
        except ApiError as error:
            self._send(Response(error.code, error.status()))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # answer as an API server does, and keep serving
            logger.exception("simulated API server failed on %s %s", method, self.path)
            self._send(Response(500, ApiError(500, f"Internal error occurred: {error}").status()))

    def _authorized(self) -> bool:
        # The scheme is case-insensitive (RFC 9110): the in-cluster client sends "bearer".
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            token.encode(), self.sim.token.encode()
        )

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> Response:
        discovery = _discovery(path, self.sim)
        if discovery is not None:
            if method != "GET":
                raise ApiError(
                    405, "the server does not allow this method on the requested resource"
                )
            return Response(200, discovery)
        target = _parse_path(path)
        if target is None:
            raise ApiError(404, "the server could not find the requested resource")
        resource, namespace, name, subresource = target
        operation = _OPERATIONS.get((method, resource.name, name is not None, subresource))
        if operation is None:
            raise ApiError(405, "the server does not allow this method on the requested resource")
        return operation(
            self, resource, namespace, name, query, body, self.headers.get("Content-Type", "")
        )

    def _send(self, response: Response) -> None:
        if isinstance(response.body, str):
            payload = response.body.encode()
        else:
            payload = json.dumps(response.body, separators=(",", ":")).encode()
        try:
            self.send_response(response.code)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-cache, private")
            for header, value in response.headers.items():
                self.send_header(header, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout fault, usually)

    # --- watches -------------------------------------------------------------------------------

    def _watch(self, path: str, query: dict[str, str]) -> None:
        """Stream watch events as chunked newline-delimited JSON until the timeout or shutdown.

        ``resourceVersion`` absent or ``0`` starts with an ADDED event per existing object; ``N``
        streams every change after N. Too old an N (or an injected fault) gets one ERROR event with
        a 410 ``Expired`` Status, which is how a real API server ends such a watch.
        """
        target = _parse_path(path)
        if target is None or target[2] is not None:
            raise ApiError(404, "the server could not find the requested resource")
        resource, namespace, _, _ = target
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(resource.name, query.get("fieldSelector"))
        timeout = _int_param(query, "timeoutSeconds", DEFAULT_WATCH_SECONDS)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        stream = _WatchStream(self, resource, namespace, labels, fields, bookmarks)
        stream.open()
        try:
            stream.run(query.get("resourceVersion") or "0", time.monotonic() + timeout)
            stream.close()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # headers are sent: a 500 Status can no longer be the answer
            logger.exception("watch on %s failed", path)
            self.close_connection = True

    # --- /sim ----------------------------------------------------------------------------------

    def _sim_api(self, method: str, path: str, body: bytes) -> Response:
        data = _json(body) if body else {}
        if (method, path) == ("GET", "/sim/state"):
            with self.sim._requests_lock:
                requests = dict(self.sim.requests)
            return Response(200, {**self.cluster.summary(), "requests": requests})
        if (method, path) == ("POST", "/sim/clock"):
            if not isinstance(data, dict) or not isinstance(data.get("advance"), int | float):
                raise bad_request('expected {"advance": seconds}')
            self.cluster.advance(float(data["advance"]))
            return Response(200, self.cluster.summary())
        if (method, path) == ("POST", "/sim/faults"):
            if not isinstance(data, dict):
                raise bad_request('expected {"kind": ...}')
            return Response(200, inject_fault(self.cluster, data))
        if (method, path) == ("DELETE", "/sim/faults"):
            self.cluster.faults.clear()
            return Response(200, {"cleared": True})
        raise ApiError(404, "the server could not find the requested resource")


class _WatchStream:
    """One watch connection: the chunked stream and the events it has sent."""

    def __init__(
        self,
        handler: _Handler,
        resource: Resource,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        bookmarks: bool,
    ) -> None:
        self.handler = handler
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.bookmarks = bookmarks
        self.store = handler.cluster.store

    def open(self) -> None:
        handler = self.handler
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Cache-Control", "no-cache, private")
        handler.end_headers()

    def close(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()

    def run(self, resource_version: str, deadline: float) -> None:
        cluster, sim = self.handler.cluster, self.handler.sim
        if cluster.faults.take_gone_watch():
            self._expired(f"too old resource version: {resource_version} ({self.store.revision})")
            return
        try:
            cursor = int(resource_version)
        except ValueError:
            self._send(
                "ERROR", bad_request(f"invalid resource version: {resource_version}").status()
            )
            return
        cluster.tick()
        if cursor == 0:
            with self.store.lock:
                initial = [
                    obj
                    for obj in self.store.items(self.resource.name, self.namespace)
                    if self._matches(obj)
                ]
                cursor = self.store.revision
            for obj in initial:
                self._send("ADDED", obj)
        last_sent = time.monotonic()
        while not sim.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._client_gone():
                break
            try:
                changes, revision = self._wait_for_changes(cursor, min(remaining, _WAIT_SLICE))
            except Expired as expired:
                self._expired(str(expired))
                return
            for change in changes:
                cursor = change.resource_version
                event = self._event(change)
                if event is not None:
                    self._send(*event)
                    last_sent = time.monotonic()
            if not changes:
                cursor = max(cursor, revision)
            if self.bookmarks and time.monotonic() - last_sent >= sim.bookmark_interval:
                self._bookmark(cursor)
                last_sent = time.monotonic()
        if self.bookmarks and not sim.stopping.is_set():
            self._bookmark(cursor)  # the API server sends one just before a watch times out

    def _client_gone(self) -> bool:
        """True once the client closed its end (``Watch.stop()``), so the thread can end now
        rather than at the next event or the timeout."""
        connection = self.handler.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _wait_for_changes(self, cursor: int, wait: float) -> tuple[list[Change], int]:
        with self.store.changed:
            changes = self.store.changes_since(cursor, [self.resource.name])
            if not changes:
                self.store.changed.wait(wait)
                changes = self.store.changes_since(cursor, [self.resource.name])
            return changes, self.store.revision

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, obj["metadata"].get("labels")) and fields_match(
            self.fields, obj
        )

    def _event(self, change: Change) -> tuple[str, dict[str, Any]] | None:
        """The event this watcher sees: objects entering or leaving its selection are ADDED or
        DELETED, as the API server's watch cache reports them."""
        now, before = self._matches(change.object), self._matches(change.previous)
        if change.type == "DELETED":
            return ("DELETED", change.object) if before else None
        if now and before:
            return "MODIFIED", change.object
        if now:
            return "ADDED", change.object
        if before:
            return "DELETED", change.object
        return None

    def _bookmark(self, cursor: int) -> None:
        self._send(
            "BOOKMARK",
            {
                "kind": self.resource.kind,
                "apiVersion": self.resource.api_version,
                "metadata": {"resourceVersion": str(cursor)},
            },
        )

    def _expired(self, message: str) -> None:
        self._send("ERROR", failure_status(410, "Expired", message))

    def _send(self, kind: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        wfile = self.handler.wfile
        wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        wfile.flush()


# --- REST operations ---------------------------------------------------------------------------

Operation = Callable[
    [_Handler, Resource, "str | None", "str | None", dict[str, str], bytes, str], Response
]


def _list(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(resource.name, query.get("fieldSelector"))
    items, revision = handler.cluster.list(resource.name, namespace, labels, fields)
    items, token, remaining = _page(items, query)
    metadata: dict[str, Any] = {"resourceVersion": str(revision)}
    if token:
        metadata["continue"] = token
        metadata["remainingItemCount"] = remaining
    # Items of a list carry no kind and apiVersion (the list says them once).
    stripped = [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in items]
    return Response(
        200,
        {
            "kind": resource.list_kind,
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": stripped,
        },
    )


def _page(
    items: list[dict[str, Any]], query: dict[str, str]
) -> tuple[list[dict[str, Any]], str, int]:
    """Apply ``continue`` then ``limit``; the token names the last key returned."""
    token = query.get("continue")
    if token:
        try:
            after = json.loads(base64.urlsafe_b64decode(token.encode()))["after"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise bad_request("continue key is not valid") from None
        items = [obj for obj in items if _sort_key(obj) > tuple(after)]
    limit = _int_param(query, "limit", 0)
    if limit <= 0 or len(items) <= limit:
        return items, "", 0
    page, rest = items[:limit], len(items) - limit
    last = list(_sort_key(page[-1]))
    next_token = base64.urlsafe_b64encode(json.dumps({"after": last}).encode()).decode()
    return page, next_token, rest


def _sort_key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _get(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    assert name is not None
    return Response(200, handler.cluster.get(resource.name, namespace or "", name))


def _create(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    data, dry_run = _json(body), bool(query.get("dryRun"))
    cluster = handler.cluster
    if resource.name == "namespaces":
        return Response(201, cluster.create_namespace(data, dry_run=dry_run))
    assert namespace is not None
    if resource.name == "jobs":
        return Response(201, cluster.create_job(namespace, data, dry_run=dry_run))
    if resource.name == "secrets":
        return Response(201, cluster.create_secret(namespace, data, dry_run=dry_run))
    if resource.name == "provisioningrequests":
        return Response(201, cluster.create_provisioning_request(namespace, data, dry_run=dry_run))
    return Response(201, cluster.create_pod(namespace, data, dry_run=dry_run))


def _delete(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    assert namespace is not None and name is not None
    propagation, grace, dry_run = parse_deletion(_json(body) if body else None, query)
    if resource.name == "jobs":
        result, warning = handler.cluster.delete_job(
            namespace, name, propagation=propagation, dry_run=dry_run
        )
        return Response(200, result, headers={"Warning": warning} if warning else {})
    if resource.name == "secrets":
        return Response(200, handler.cluster.delete_secret(namespace, name, dry_run=dry_run))
    if resource.name == "provisioningrequests":
        return Response(200, handler.cluster.delete_provisioning_request(namespace, name))
    return Response(
        200, handler.cluster.delete_pod(namespace, name, grace_seconds=grace, dry_run=dry_run)
    )


def _patch_node(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    assert name is not None
    return Response(
        200,
        handler.cluster.patch_node(
            name, _json(body), content_type, dry_run=bool(query.get("dryRun"))
        ),
    )


def _patch_node_status(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    assert name is not None
    return Response(
        200,
        handler.cluster.patch_node(
            name, _json(body), content_type, status=True, dry_run=bool(query.get("dryRun"))
        ),
    )


def _log(
    handler: _Handler,
    resource: Resource,
    namespace: str | None,
    name: str | None,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> Response:
    assert namespace is not None and name is not None
    tail = _int_param(query, "tailLines", -1)
    limit_bytes = _int_param(query, "limitBytes", -1)
    text = handler.cluster.pod_log(
        namespace,
        name,
        container=query.get("container") or None,
        tail_lines=None if tail < 0 else tail,
        timestamps=query.get("timestamps") in ("true", "1"),
        limit_bytes=None if limit_bytes < 0 else limit_bytes,
        previous=query.get("previous") in ("true", "1"),
    )
    return Response(200, text, content_type="text/plain")


# (method, resource, names one object, subresource) → operation
_OPERATIONS: dict[tuple[str, str, bool, str | None], Operation] = {
    **{("GET", r, False, None): _list for r in RESOURCES},
    **{("GET", r, True, None): _get for r in RESOURCES},
    ("GET", "nodes", True, "status"): _get,
    ("GET", "pods", True, "status"): _get,
    ("GET", "jobs", True, "status"): _get,
    ("GET", "pods", True, "log"): _log,
    ("POST", "namespaces", False, None): _create,
    ("POST", "jobs", False, None): _create,
    ("POST", "pods", False, None): _create,
    ("POST", "secrets", False, None): _create,
    ("POST", "provisioningrequests", False, None): _create,
    ("DELETE", "provisioningrequests", True, None): _delete,
    ("DELETE", "jobs", True, None): _delete,
    ("DELETE", "pods", True, None): _delete,
    ("DELETE", "secrets", True, None): _delete,
    ("PATCH", "nodes", True, None): _patch_node,
    ("PATCH", "nodes", True, "status"): _patch_node_status,
}


def _parse_path(path: str) -> tuple[Resource, str | None, str | None, str | None] | None:
    """``/api/v1/namespaces/ns/pods/x/log`` → (pods, "ns", "x", "log"); None if not served."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:3] == ["apis", "batch", "v1"]:
        group, rest = "batch", parts[3:]
    elif parts[:3] == ["apis", PROVISIONING_GROUP, "v1"]:
        group, rest = PROVISIONING_GROUP, parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = RESOURCES.get(rest[0])
    if resource is None or resource.group != group:
        return None
    if namespace is not None and not resource.namespaced:
        return None
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return resource, namespace, name, subresource


def _discovery(path: str, sim: SimServer) -> dict[str, Any] | None:
    """The discovery documents a client may ask for first."""
    if path == "/version":
        return {**KUBERNETES_VERSION, "platform": "linux/amd64", "goVersion": "go1.24.0"}
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{sim.host}:{sim.port}"}
            ],
        }
    batch_version = {"groupVersion": "batch/v1", "version": "v1"}
    batch_group = {"name": "batch", "versions": [batch_version], "preferredVersion": batch_version}
    scaling_version = {"groupVersion": f"{PROVISIONING_GROUP}/v1", "version": "v1"}
    scaling_group = {
        "name": PROVISIONING_GROUP,
        "versions": [scaling_version],
        "preferredVersion": scaling_version,
    }
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [batch_group, scaling_group]}
    if path == "/apis/batch":
        return {"kind": "APIGroup", "apiVersion": "v1", **batch_group}
    if path == f"/apis/{PROVISIONING_GROUP}":
        return {"kind": "APIGroup", "apiVersion": "v1", **scaling_group}
    groups = {"/api/v1": "", "/apis/batch/v1": "batch", f"/apis/{PROVISIONING_GROUP}/v1": None}
    if path in groups:
        group = groups[path] if groups[path] is not None else PROVISIONING_GROUP
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/v1" if group else "v1",
            "resources": [_api_resource(r) for r in RESOURCES.values() if r.group == group],
        }
    return None


def _api_resource(resource: Resource) -> dict[str, Any]:
    verbs = ["get", "list", "watch"]
    if resource.name in ("namespaces", "jobs", "pods", "secrets", "provisioningrequests"):
        verbs.append("create")
    if resource.name in ("jobs", "pods", "secrets", "provisioningrequests"):
        verbs.append("delete")
    if resource.name == "nodes":
        verbs.append("patch")
    entry: dict[str, Any] = {
        "name": resource.name,
        "singularName": resource.kind.lower(),
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": verbs,
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    return entry


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(
            f"the body of the request could not be decoded as JSON: {error}"
        ) from None


def _int_param(query: dict[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {text!r}") from None


# --- faults through /sim/faults ----------------------------------------------------------------


def inject_fault(cluster: SimCluster, spec: dict[str, Any]) -> dict[str, Any]:
    """Arm or perform the fault ``spec`` describes (``kind`` plus its options); see
    docs/simulated-cluster.md for every kind. Raises 400 for an unknown kind."""
    kind = spec.get("kind")
    options = {k: v for k, v in spec.items() if k != "kind"}
    try:
        if kind == "http_error":
            cluster.faults.add(
                RequestFault(
                    count=int(options.get("count", 1)),
                    status=int(options.get("status", 500)),
                    method=options.get("method"),
                    path=options.get("path"),
                    watch=options.get("watch"),
                    message=str(options.get("message", "")),
                )
            )
        elif kind == "delay":
            cluster.faults.add(
                RequestFault(
                    count=int(options.get("count", 1)),
                    status=None,
                    delay_seconds=float(options["seconds"]),
                    method=options.get("method"),
                    path=options.get("path"),
                    watch=options.get("watch"),
                    after=bool(options.get("after", False)),
                )
            )
        elif kind == "watch_gone":
            cluster.faults.arm_gone_watches(int(options.get("count", 1)))
        elif kind == "expire_watches":
            cluster.expire_watches()
        elif kind == "image_pull":
            cluster.faults.fail_image_pulls(str(options["pattern"]))
        elif kind in ("node_unhealthy", "node_healthy"):
            node = str(options.pop("node"))
            return cluster.set_node_health(node, healthy=kind == "node_healthy", **options)
        elif kind in ("node_not_ready", "node_ready"):
            return cluster.set_node_ready(str(options["node"]), ready=kind == "node_ready")
        elif kind == "oom_kill":
            return cluster.oom_kill(str(options["namespace"]), str(options["pod"]))
        elif kind == "delete_job":
            body, _ = cluster.delete_job(
                str(options["namespace"]),
                str(options["name"]),
                propagation=options.get("propagation", "Background"),
            )
            return body
        elif kind == "provisioning_failure":
            cluster.fail_provisioning(int(options.get("count", 1)))
        elif kind == "foreign_pod":
            return cluster.create_foreign_pod(**options)
        else:
            raise bad_request(f"unknown fault kind: {kind!r}")
    except (KeyError, TypeError, ValueError) as error:
        raise bad_request(f"invalid fault {spec!r}: {error}") from None
    return {"armed": kind}
