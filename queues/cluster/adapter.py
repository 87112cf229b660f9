"""The one way the portal reaches Kubernetes: the official ``kubernetes`` client.

The adapter reads and writes; it never decides. Lists come back as raw JSON (``dict``) so that
mirroring thousands of pods skips building client models; ``queues.cluster.nodes`` and
``queues.cluster.pods`` interpret them.

Errors are sorted for the reconcile:

* ``ClusterUnreachable`` — connection refused, timeouts, HTTP 5xx: retry later with backoff; jobs
  show ``ClusterUnreachable`` meanwhile.
* ``ClusterRejected`` — a 4xx the request itself caused (forbidden, invalid): retrying the same
  request will not help; the job ends ``failed`` with the API's message after a few tries.
* ``AlreadyExists`` on create and ``NotFound`` on delete are success: the world is as wanted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from queues.cluster.manifests import MANAGED_BY
from queues.cluster.pods import JOB_ID_LABEL

logger = logging.getLogger(__name__)

PORTAL_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"


class ClusterUnreachable(Exception):
    """The cluster did not answer usefully (network, timeout, 5xx); try again later."""


class ClusterRejected(Exception):
    """The cluster refused the request itself (4xx); ``status`` and the API's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Listing:
    items: list[dict[str, Any]]
    resource_version: str


def _status_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


class Cluster:
    """A Kubernetes cluster reached through ``api_client`` (from a kubeconfig or in-cluster)."""

    def __init__(self, api_client: client.ApiClient, *, timeout: tuple[float, float] = (3, 15)):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.timeout = timeout
        self.calls = 0  # API requests made, for the benchmark and the tests
        self._calls_lock = threading.Lock()  # the mirror's watch threads count theirs too
        # Failed requests by kind ("connection", "http_503"…): the reconcile adds them to the
        # exported counters (queues.counters) after each cycle.
        self.errors: Counter[str] = Counter()
        self._namespaces: set[str] = set()
        # Told of each Job this client created, with the API server's answer (the worker's
        # mirror, which counts it as there until its watch reports it: ``ClusterMirror.expect``).
        self.on_created: Callable[[str, dict[str, Any]], None] | None = None

    @classmethod
    def from_kubeconfig(
        cls, path: str, *, context: str | None = None, timeout: tuple[float, float] = (3, 15)
    ) -> Cluster:
        return cls(
            config.new_client_from_config(config_file=path, context=context), timeout=timeout
        )

    @classmethod
    def in_cluster(cls) -> Cluster:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    def close(self) -> None:
        self.api_client.close()

    # --- plumbing --------------------------------------------------------------------------------

    def _call(self, method: Any, *args: Any, raw: bool = False, **kwargs: Any) -> Any:
        """One API request, with errors sorted as the module docstring says. ``raw`` returns the
        answer's JSON as a dict instead of the client's model objects."""
        self._count_call()
        try:
            result = method(
                *args, _request_timeout=self.timeout, _preload_content=not raw, **kwargs
            )
        except ApiException as exc:
            self._count_error(f"http_{exc.status}" if exc.status else "connection")
            if exc.status is None or exc.status >= 500 or exc.status == 429:
                raise ClusterUnreachable(f"HTTP {exc.status}: {_status_message(exc)}") from exc
            raise ClusterRejected(exc.status, _status_message(exc)) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._count_error("connection")
            raise ClusterUnreachable(f"{type(exc).__name__}: {exc}") from exc
        if raw:
            try:
                return json.loads(result.data)
            finally:
                result.release_conn()
        return result

    def _count_call(self) -> None:
        with self._calls_lock:
            self.calls += 1

    def _count_error(self, kind: str) -> None:
        with self._calls_lock:
            self.errors[kind] += 1

    def errors_taken(self) -> Counter[str]:
        """The failed requests counted since the last call, by kind (and reset)."""
        with self._calls_lock:
            taken, self.errors = self.errors, Counter()
        return taken

    def _list(self, method: Any, **kwargs: Any) -> Listing:
        """Every item, following ``continue`` tokens page by page."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(method, raw=True, limit=500, _continue=token, **kwargs)
            items += page.get("items") or []
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                return Listing(items, str(metadata.get("resourceVersion", "")))

    # --- reads -----------------------------------------------------------------------------------

    def list_nodes(self) -> Listing:
        return self._list(self.core.list_node)

    def read_node(self, name: str) -> dict[str, Any]:
        """One Node as JSON (``ClusterRejected`` 404 when there is none)."""
        result: dict[str, Any] = self._call(self.core.read_node, name, raw=True)
        return result

    def list_pods(self) -> Listing:
        """Every bound pod in the cluster: the portal's and others' (which still hold GPUs)."""
        return self._list(self.core.list_pod_for_all_namespaces, field_selector="spec.nodeName!=")

    def list_all_pods(self) -> Listing:
        """Every pod in the cluster (the mirror follows them all: bound ones hold GPUs, the
        portal's unbound ones carry the scheduler's message)."""
        return self._list(self.core.list_pod_for_all_namespaces)

    def list_portal_pods(self) -> Listing:
        """The portal's pods, bound or not (unbound ones carry the scheduler's message)."""
        return self._list(self.core.list_pod_for_all_namespaces, label_selector=PORTAL_SELECTOR)

    def list_portal_jobs(self) -> Listing:
        return self._list(self.batch.list_job_for_all_namespaces, label_selector=PORTAL_SELECTOR)

    def pod_log(self, namespace: str, pod: str, *, tail_lines: int = 50) -> str:
        try:
            return self._call(
                self.core.read_namespaced_pod_log, pod, namespace, tail_lines=tail_lines
            )
        except ClusterRejected as exc:
            if exc.status in (400, 404):
                return ""  # not started yet, or gone
            raise

    def pods_of_job(self, namespace: str, job_id: int) -> list[dict[str, Any]]:
        """The pods of portal job ``job_id`` in ``namespace`` (raw JSON), in any phase."""
        return self._list(
            self.core.list_namespaced_pod,
            namespace=namespace,
            label_selector=f"{JOB_ID_LABEL}={job_id}",
        ).items

    # --- writes ----------------------------------------------------------------------------------

    def ensure_namespace(self, name: str) -> None:
        """Make sure the namespace exists (remembered for this client's life: namespaces the
        portal creates are not expected to vanish, and a create would recreate one anyway)."""
        if name in self._namespaces:
            return
        self._ensure_namespace(name)
        self._namespaces.add(name)

    def _ensure_namespace(self, name: str) -> None:
        try:
            self._call(self.core.read_namespace, name)
        except ClusterRejected as exc:
            if exc.status != 404:
                raise
            try:
                self._call(self.core.create_namespace, {"metadata": {"name": name}})
            except ClusterRejected as again:
                if again.status != 409:
                    raise

    def create_job(self, manifest: dict[str, Any]) -> bool:
        """Create the Job; False if a Job of that name that is ours already exists (a retried
        create after a crash). A same-named Job that is not ours is a rejection."""
        namespace = manifest["metadata"]["namespace"]
        try:
            # raw: the answer as JSON, without building the client's models of the whole Job
            created = self._call(self.batch.create_namespaced_job, namespace, manifest, raw=True)
        except ClusterRejected as exc:
            if exc.status == 404:
                # The namespace went away since it was remembered: make it again, once.
                self._namespaces.discard(namespace)
                self.ensure_namespace(namespace)
                created = self._call(
                    self.batch.create_namespaced_job, namespace, manifest, raw=True
                )
            elif exc.status == 409:
                created = None
            else:
                raise
        if created is not None:
            if self.on_created is not None:
                self.on_created("jobs", created)
            return True
        existing = self._call(
            self.batch.read_namespaced_job, manifest["metadata"]["name"], namespace, raw=True
        )
        ours = (existing.get("metadata", {}).get("labels") or {}).get(JOB_ID_LABEL)
        if ours != manifest["metadata"]["labels"][JOB_ID_LABEL]:
            raise ClusterRejected(
                409, f"a Job named {manifest['metadata']['name']} exists and is not ours"
            )
        return False

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Patch a Node with a JSON merge patch (RFC 7386: maps merge, ``None`` removes a key,
        lists such as ``spec.taints`` are replaced whole). Put ``metadata.resourceVersion`` in
        the patch to make it conditional: a node changed meanwhile is a 409 ``ClusterRejected``."""
        result: dict[str, Any] = self._call(
            self.core.patch_node,
            name,
            patch,
            raw=True,
            _content_type="application/merge-patch+json",
        )
        return result

    def delete_job(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        """Delete the Job and, in the background, its pods; False if it was already gone."""
        return self._delete(
            self.batch.delete_namespaced_job,
            name,
            namespace,
            propagation_policy="Background",
            grace_period_seconds=grace_seconds,
        )

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int) -> bool:
        """Delete one pod with ``grace_seconds`` to stop; False if it was already gone."""
        return self._delete(
            self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_seconds
        )

    def _delete(self, method: Any, *args: Any, **kwargs: Any) -> bool:
        """A delete that is done when the object is gone: False if it already was (404)."""
        try:
            self._call(method, *args, raw=True, **kwargs)
            return True
        except ClusterRejected as exc:
            if exc.status == 404:
                return False
            raise

    def watch(
        self,
        kind: str,
        resource_version: str,
        *,
        timeout_seconds: int = 5,
        label_selector: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Changes to ``kind`` (nodes, pods, jobs) after ``resource_version``, as raw events
        ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": {...}}``.

        Raises ``ClusterRejected`` with status 410 when the version is too old (relist then),
        ``ClusterUnreachable`` for anything else that breaks the stream.
        """
        method = {
            "nodes": self.core.list_node,
            "pods": self.core.list_pod_for_all_namespaces,
            "jobs": self.batch.list_job_for_all_namespaces,
        }[kind]
        self._count_call()
        options: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        stream = _RawWatch().stream(
            method,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _request_timeout=(self.timeout[0], timeout_seconds + self.timeout[1]),
            **options,
        )
        try:
            yield from stream
        except ApiException as exc:
            if exc.status == 410:  # the resource version expired: the mirror lists again
                raise ClusterRejected(410, str(exc.reason)) from exc
            self._count_error(f"http_{exc.status}" if exc.status else "connection")
            raise ClusterUnreachable(f"HTTP {exc.status}: {_status_message(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._count_error("connection")
            raise ClusterUnreachable(f"{type(exc).__name__}: {exc}") from exc


class _RawWatch(watch.Watch):
    """The client's watch, keeping each event's object as the JSON the server sent: building
    models for thousands of pods is the slow part, and the mirror reads JSON anyway."""

    def unmarshal_event(self, data: str, return_type: Any) -> Any:
        return super().unmarshal_event(data, None)


def cluster_from_settings() -> Cluster:
    """The cluster the settings name (the simulated one by default)."""
    from django.conf import settings

    if settings.CLUSTER_MODE == "in-cluster":
        return Cluster.in_cluster()
    return Cluster.from_kubeconfig(settings.CLUSTER_KUBECONFIG, context=settings.CLUSTER_CONTEXT)
