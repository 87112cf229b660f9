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

Credentials rotate (a projected service-account token is replaced about every hour; a kubeconfig
is renewed; a restarted API server wants a new token). A ``Cluster`` built from a
``CredentialSource`` notices it without a restart: before a request it looks (at most once a
second) whether the source's files changed and, if so, loads them again; a request answered 401
loads them again and is retried once. A 401 that persists is ``ClusterUnreachable``, not a
rejection of the request: the job that was being created waits, it does not fail.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from queues.cluster.manifests import MANAGED_BY
from queues.cluster.pods import JOB_ID_LABEL

logger = logging.getLogger(__name__)

PORTAL_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
# The cluster-autoscaler's ProvisioningRequest (autoscaling.x-k8s.io): how the portal asks a node
# pool's provisioner for nodes (queues/cluster/provisioning.py builds them).
PROVISIONING_GROUP = "autoscaling.x-k8s.io"
PROVISIONING_VERSION = "v1"
PROVISIONING_PLURAL = "provisioningrequests"
# How often, at most, a request first looks whether the credentials' files changed.
CREDENTIALS_CHECK_SECONDS = 1.0


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


# --- Where the credentials come from ----------------------------------------------------------


def _file_version(path: str | Path) -> tuple[int, int, int] | None:
    """What changes when a file is replaced or rewritten (``None``: no such file). Kubernetes
    swaps projected volumes by renaming a symlinked directory, so this follows links."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns)


class CredentialSource(Protocol):
    """Where a ``Cluster`` gets its API client from, and how it tells that they changed."""

    def version(self) -> object:
        """Cheap to call: a value that changes when the credentials may have changed."""

    def api_client(self) -> client.ApiClient:
        """A new client with the credentials as they are now."""

    def __str__(self) -> str:
        """Where they come from, for log lines (never the credentials themselves)."""


@dataclass(frozen=True)
class KubeconfigSource:
    """A kubeconfig file (and the token or certificate files it names)."""

    path: str
    context: str | None = None

    def version(self) -> object:
        return _file_version(self.path)

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=self.path, context=self.context)

    def __str__(self) -> str:
        return f"the kubeconfig {self.path}"


@dataclass(frozen=True)
class InClusterSource:
    """The service account the portal's pod runs as: its projected token (re-read as the kubelet
    rotates it), the cluster's CA and the ``KUBERNETES_SERVICE_*`` address."""

    token_file: str = SERVICE_TOKEN_FILENAME
    ca_file: str = SERVICE_CERT_FILENAME
    environ: Mapping[str, str] | None = None

    def version(self) -> object:
        return (_file_version(self.token_file), _file_version(self.ca_file))

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        InClusterConfigLoader(
            token_filename=self.token_file,
            cert_filename=self.ca_file,
            environ=os.environ if self.environ is None else self.environ,
        ).load_and_set(configuration)
        return client.ApiClient(configuration)

    def __str__(self) -> str:
        return f"the service account token {self.token_file}"


def _status_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


class Cluster:
    """A Kubernetes cluster reached through ``api_client``, or through the clients ``source``
    makes (from a kubeconfig or in-cluster), loaded again when its credentials change."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        *,
        source: CredentialSource | None = None,
        timeout: tuple[float, float] = (3, 15),
    ):
        if api_client is None and source is None:
            raise ValueError("a Cluster needs an api_client or a credential source")
        self.source = source
        self._credentials_lock = threading.Lock()
        self._source_version = source.version() if source is not None else None
        self._checked_at = time.monotonic()
        self.reloads = 0  # times the credentials were loaded again (tests, logs)
        # Clients replaced by a reload: a watch may still be reading through one; closed here.
        self._retired: list[client.ApiClient] = []
        self._use(api_client if api_client is not None else self._source_client())
        self.timeout = timeout
        self.calls = 0  # API requests made, for the benchmark and the tests
        self._calls_lock = threading.Lock()  # the mirror's watch threads count theirs too
        # Failed requests by kind ("connection", "http_503"…): the reconcile adds them to the
        # exported counters (queues.counters) after each cycle.
        self.errors: Counter[str] = Counter()
        self._namespaces: set[str] = set()
        # Whether every namespace was listed once (None: not yet; False: listing was refused)
        self._namespaces_listed: bool | None = None
        # Told of each Job this client created, with the API server's answer (the worker's
        # mirror, which counts it as there until its watch reports it: ``ClusterMirror.expect``).
        self.on_created: Callable[[str, dict[str, Any]], None] | None = None

    @classmethod
    def from_kubeconfig(
        cls, path: str, *, context: str | None = None, timeout: tuple[float, float] = (3, 15)
    ) -> Cluster:
        return cls(source=KubeconfigSource(str(path), context), timeout=timeout)

    @classmethod
    def in_cluster(cls, source: InClusterSource | None = None) -> Cluster:
        return cls(source=source or InClusterSource())

    def close(self) -> None:
        with self._credentials_lock:
            clients, self._retired = [self.api_client, *self._retired], []
        for api in clients:
            api.close()

    # --- credentials -----------------------------------------------------------------------------

    def _source_client(self) -> client.ApiClient:
        assert self.source is not None
        try:
            return self.source.api_client()
        except (config.ConfigException, OSError, ValueError) as exc:
            raise ClusterUnreachable(
                f"no usable cluster configuration in {self.source}: {exc}"
            ) from exc

    def _use(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def _reload(self, why: str, *, unless_since: int | None = None) -> None:
        """Load the credentials again from the source (one thread at a time; a thread whose
        request failed on credentials another thread has replaced since skips it)."""
        with self._credentials_lock:
            if unless_since is not None and self.reloads != unless_since:
                return
            version = self.source.version() if self.source is not None else None
            fresh = self._source_client()
            self._retired.append(self.api_client)
            self._use(fresh)
            self._source_version = version
            self.reloads += 1
        logger.warning("cluster credentials reloaded from %s: %s", self.source, why)

    def _fresh_credentials(self) -> None:
        """Before a request: reload if the source's files changed (looked at once a second)."""
        if self.source is None:
            return
        now = time.monotonic()
        if now - self._checked_at < CREDENTIALS_CHECK_SECONDS:
            return
        self._checked_at = now
        if self.source.version() != self._source_version:
            self._reload("its files changed")

    def _rebound(self, method: Any) -> Any:
        """``method`` of the API object that the current client serves (after a reload)."""
        api = getattr(method, "__self__", None)
        for current in (self.core, self.batch):
            if isinstance(api, type(current)):
                return getattr(current, method.__name__)
        return method

    # --- plumbing --------------------------------------------------------------------------------

    def _call(self, method: Any, *args: Any, raw: bool = False, **kwargs: Any) -> Any:
        """One API request, with errors sorted as the module docstring says. ``raw`` returns the
        answer's JSON as a dict instead of the client's model objects. A 401 loads the
        credentials again and tries once more."""
        self._fresh_credentials()
        try:
            return self._request(self._rebound(method), args, raw, kwargs)
        except ApiException as exc:
            if exc.status != 401 or self.source is None:
                raise self._sorted(exc) from exc
            self._reload("the cluster answered 401 Unauthorized", unless_since=self.reloads)
            try:
                return self._request(self._rebound(method), args, raw, kwargs)
            except ApiException as again:
                raise self._sorted(again) from again

    def _request(self, method: Any, args: Any, raw: bool, kwargs: dict[str, Any]) -> Any:
        self._count_call()
        try:
            result = method(
                *args, _request_timeout=self.timeout, _preload_content=not raw, **kwargs
            )
        except ApiException as exc:
            self._count_error(f"http_{exc.status}" if exc.status else "connection")
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._count_error("connection")
            raise ClusterUnreachable(f"{type(exc).__name__}: {exc}") from exc
        if raw:
            try:
                return json.loads(result.data)
            finally:
                result.release_conn()
        return result

    def _sorted(self, exc: ApiException) -> ClusterUnreachable | ClusterRejected:
        """The adapter's error for an API error (the module docstring's sorting)."""
        if exc.status == 401:
            # Credentials, not the request: retrying once they are renewed will work.
            where = f"; loaded again from {self.source}" if self.source is not None else ""
            return ClusterUnreachable(
                f"HTTP 401: the cluster refused the portal's credentials "
                f"({_status_message(exc)}){where}"
            )
        if exc.status is None or exc.status >= 500 or exc.status == 429:
            return ClusterUnreachable(f"HTTP {exc.status}: {_status_message(exc)}")
        return ClusterRejected(exc.status, _status_message(exc))

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
        portal creates are not expected to vanish, and a create would recreate one anyway).

        The first call lists every namespace once, so a cycle that starts the first jobs of
        thousands of teams (Kueue's large-scale replay: 2,000) creates the missing ones without
        asking for each first. Without the right to list, each is read, then created."""
        if name in self._namespaces:
            return
        if self._namespaces_listed is None:
            try:
                listed = self._list(self.core.list_namespace).items
            except ClusterRejected:
                self._namespaces_listed = False
            else:
                self._namespaces.update(n["metadata"]["name"] for n in listed)
                self._namespaces_listed = True
                if name in self._namespaces:
                    return
        if self._namespaces_listed:
            self._create_namespace(name)  # not there when listed (a 409 says it came since)
        else:
            self._ensure_namespace(name)
        self._namespaces.add(name)

    def _ensure_namespace(self, name: str) -> None:
        try:
            self._call(self.core.read_namespace, name)
        except ClusterRejected as exc:
            if exc.status != 404:
                raise
            self._create_namespace(name)

    def _create_namespace(self, name: str) -> None:
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

    def list_provisioning_requests(self, namespace: str) -> Listing:
        """The ProvisioningRequests in ``namespace`` (the portal's, by its label)."""
        return self._list(
            self.custom.list_namespaced_custom_object,
            group=PROVISIONING_GROUP,
            version=PROVISIONING_VERSION,
            namespace=namespace,
            plural=PROVISIONING_PLURAL,
            label_selector=PORTAL_SELECTOR,
        )

    def create_provisioning_request(self, body: dict[str, Any]) -> bool:
        """Create a ProvisioningRequest; False if one of that name exists (a retried create).
        The portal asks for nodes only this way: it never creates a Node."""
        namespace = body["metadata"]["namespace"]
        self.ensure_namespace(namespace)
        try:
            self._call(
                self.custom.create_namespaced_custom_object,
                PROVISIONING_GROUP,
                PROVISIONING_VERSION,
                namespace,
                PROVISIONING_PLURAL,
                body,
                raw=True,
            )
        except ClusterRejected as exc:
            if exc.status == 409:
                return False
            raise
        return True

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
        ``ClusterUnreachable`` for anything else that breaks the stream (after a 401, with the
        credentials loaded again for the next try).
        """
        self._fresh_credentials()
        options: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        for attempt in (1, 2):
            reloads, started = self.reloads, False
            method = {
                "nodes": self.core.list_node,
                "pods": self.core.list_pod_for_all_namespaces,
                "jobs": self.batch.list_job_for_all_namespaces,
            }[kind]
            self._count_call()
            stream = _RawWatch().stream(
                method,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                _request_timeout=(self.timeout[0], timeout_seconds + self.timeout[1]),
                **options,
            )
            try:
                for event in stream:
                    started = True
                    yield event
                return
            except ApiException as exc:
                if exc.status == 410:  # the resource version expired: the mirror lists again
                    raise ClusterRejected(410, str(exc.reason)) from exc
                self._count_error(f"http_{exc.status}" if exc.status else "connection")
                if exc.status == 401 and self.source is not None:
                    self._reload("the cluster answered 401 Unauthorized", unless_since=reloads)
                    if attempt == 1 and not started:
                        continue  # the watch again, once, with the credentials just loaded
                error = self._sorted(exc)
                if isinstance(error, ClusterRejected):  # a 4xx on a watch: it cannot go on
                    error = ClusterUnreachable(f"HTTP {exc.status}: {_status_message(exc)}")
                raise error from exc
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
        return Cluster.in_cluster(
            InClusterSource(
                token_file=settings.CLUSTER_TOKEN_FILE, ca_file=settings.CLUSTER_CA_FILE
            )
        )
    return Cluster.from_kubeconfig(settings.CLUSTER_KUBECONFIG, context=settings.CLUSTER_CONTEXT)
