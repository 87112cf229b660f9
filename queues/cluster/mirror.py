"""A watch-fed mirror of the cluster: list once, then follow changes from the resourceVersion.

The official client has no informer; this is the small one the portal needs. One thread per
kind (nodes, pods, the portal's Jobs) lists, then watches from the list's resourceVersion,
applying each event to an in-memory copy, and calls ``on_freed`` (if given) when an event
says GPUs were given back: a Job ended, a pod went, or a pod of no Job ended. A ``410 Gone``
(the version fell out of the server's history) relists and resumes; any other error backs off
(1 s doubling to 30 s) and retries, and ``error`` says since when the mirror has been
failing. A reconcile reads the copy with no API call at all, so a cycle's calls are the writes
it makes: they grow with what changed, not with how many jobs there are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from queues.cluster.adapter import Cluster, ClusterRejected, ClusterUnreachable, Listing
from queues.cluster.manifests import MANAGED_BY

logger = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_SECONDS = 60
MAX_BACKOFF = 30.0
# How long a deleted object's last state is kept (``gone``): long enough for the next cycles
# to read how a pod that went between two of them ended.
TOMBSTONE_SECONDS = 300.0
# How long an object this process created counts as there before the watch reports it
# (``expect``); a watch that lags longer than this has a problem of its own.
EXPECT_SECONDS = 60.0


def _key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _uid(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


@dataclass
class _Kind:
    name: str
    lister: Callable[[], Listing]
    label_selector: str | None = None


FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


def frees_gpus(kind: str, event_type: str, before: dict | None, after: dict) -> bool:
    """Whether an event of ``kind`` means GPUs were given back (a Job that ended, a pod that
    went, a pod of no Job that ended): what a cycle waits for to admit the next jobs. A Job's
    pod that ends is not: the cycle gives the GPUs back when the Job says it completed or
    failed, a moment later, and a cycle asked for by the pod would find nothing to do and hold
    up the one the Job asks for. Pods starting, Jobs being created and nodes' heartbeats are
    not either."""
    if kind == "pods":
        if event_type == "DELETED":
            return True
        if _owned_by_job(after):
            return False
        was = ((before or {}).get("status") or {}).get("phase")
        now = (after.get("status") or {}).get("phase")
        return now in FINISHED_POD_PHASES and was not in FINISHED_POD_PHASES
    if kind == "jobs" and event_type != "DELETED":
        return _job_ended(after) and not (before is not None and _job_ended(before))
    return False


def _owned_by_job(pod: dict) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(owner.get("kind") == "Job" for owner in owners)


def _job_ended(job: dict) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


class _Follower(threading.Thread):
    """Keeps ``objects`` equal to what the cluster has of one kind."""

    def __init__(
        self,
        cluster: Cluster,
        kind: _Kind,
        lock: threading.Lock,
        on_freed: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=f"mirror-{kind.name}", daemon=True)
        self.cluster = cluster
        self.kind = kind
        self.lock = lock
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        self.stopping = threading.Event()
        self.failing_since: datetime | None = None
        self.last_error = ""
        self.relists = 0
        self.on_freed = on_freed
        # Deleted objects' last states by key, with when they went (monotonic seconds).
        self.gone: dict[str, tuple[float, dict[str, Any]]] = {}
        # Objects this process created that the watch has not reported yet, by key, with when.
        self.expected: dict[str, tuple[float, dict[str, Any]]] = {}

    def run(self) -> None:
        backoff = 1.0
        while not self.stopping.is_set():
            try:
                if not self.resource_version:
                    self._relist()
                self._follow()
                backoff = 1.0
            except ClusterRejected as exc:
                if exc.status == 410:
                    logger.info("mirror %s: %s; relisting", self.kind.name, exc.message)
                    self.resource_version = ""
                    continue
                self._failed(str(exc))
            except ClusterUnreachable as exc:
                self._failed(str(exc))
            else:
                continue
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _failed(self, error: str) -> None:
        self.failing_since = self.failing_since or datetime.now(UTC)
        self.last_error = error
        logger.warning("mirror %s: %s", self.kind.name, error)

    def _relist(self) -> None:
        listing = self.kind.lister()
        with self.lock:
            self.objects = {_key(o): o for o in listing.items}
            self.resource_version = listing.resource_version
            for key, (_, obj) in list(self.expected.items()):
                if _uid(self.objects.get(key) or {}) == _uid(obj):
                    del self.expected[key]
        self.relists += 1
        self.failing_since, self.last_error = None, ""
        self.synced.set()
        if self.on_freed is not None and self.relists > 1:
            self.on_freed()

    def _bury(self, key: str, obj: dict[str, Any]) -> None:
        """Keep a deleted object's last state a while (under the lock), forgetting old ones."""
        now = time.monotonic()
        self.gone[key] = (now, obj)
        if len(self.gone) % 100 == 0:
            self.gone = {k: v for k, v in self.gone.items() if now - v[0] < TOMBSTONE_SECONDS}

    def _follow(self) -> None:
        for event in self.cluster.watch(
            self.kind.name,
            self.resource_version,
            timeout_seconds=WATCH_SECONDS,
            label_selector=self.kind.label_selector,
        ):
            if self.stopping.is_set():
                return
            obj = event.get("raw_object") or event.get("object") or {}
            version = (obj.get("metadata") or {}).get("resourceVersion", "")
            with self.lock:
                before = self.objects.get(_key(obj))
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.objects[_key(obj)] = obj
                elif event["type"] == "DELETED":
                    self.objects.pop(_key(obj), None)
                    self._bury(_key(obj), obj)
                if version:
                    self.resource_version = version
                expected = self.expected.get(_key(obj))
                if expected is not None and _uid(expected[1]) == _uid(obj):
                    del self.expected[_key(obj)]
            self.failing_since, self.last_error = None, ""
            if self.on_freed is not None and frees_gpus(self.kind.name, event["type"], before, obj):
                self.on_freed()


class ClusterMirror:
    """Nodes, every pod and the portal's Jobs, kept current by watches. ``on_freed`` is called
    (from a watch thread; it must return quickly) whenever an event says GPUs were given back.
    A relist calls it too: what changed while the watch was down is not known event by event."""

    def __init__(self, cluster: Cluster, on_freed: Callable[[], None] | None = None) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        kinds = [
            _Kind("nodes", cluster.list_nodes),
            _Kind("pods", cluster.list_all_pods),
            _Kind(
                "jobs",
                cluster.list_portal_jobs,
                label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY}",
            ),
        ]
        self.followers = {k.name: _Follower(cluster, k, self.lock, on_freed) for k in kinds}
        cluster.on_created = self.expect
        # kind -> (the builder, {object key: (resourceVersion, facts)}), for ``facts``.
        self._facts: dict[str, tuple[Callable[..., Any], dict[str, tuple[str, Any]]]] = {}

    def start(self) -> ClusterMirror:
        for follower in self.followers.values():
            follower.start()
        return self

    def stop(self) -> None:
        for follower in self.followers.values():
            follower.stopping.set()

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(
            f.synced.wait(max(0.0, deadline - time.monotonic())) for f in self.followers.values()
        )

    def error(self) -> str:
        """Why the mirror cannot be trusted right now ("" when every kind is following)."""
        problems = []
        for name, follower in self.followers.items():
            if follower.failing_since is not None:
                since = follower.failing_since.isoformat(timespec="seconds")
                problems.append(f"{name}: {follower.last_error} (since {since})")
            elif not follower.synced.is_set():
                problems.append(f"{name}: not listed yet")
        return "; ".join(problems)

    def items(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind``: what the watch reported, and what this process created that
        it has not reported yet (``expect``)."""
        with self.lock:
            follower = self.followers[kind]
            if not follower.expected:
                return list(follower.objects.values())
            merged = dict(follower.objects)
            now = time.monotonic()
            for key, (at, obj) in list(follower.expected.items()):
                buried = follower.gone.get(key)
                if now - at > EXPECT_SECONDS or (buried and _uid(buried[1]) == _uid(obj)):
                    del follower.expected[key]  # too old to trust, or already come and gone
                else:
                    merged[key] = obj
            return list(merged.values())

    def expect(self, kind: str, obj: dict[str, Any]) -> None:
        """Count ``obj``, which this process just created (the API server's answer), as there
        until the watch reports it: a cycle that reads the mirror right after the last one
        created a Job must not take the Job for deleted because its ADDED event is still on
        the way (the "expectations" of Kubernetes' own controllers)."""
        follower = self.followers.get(kind)
        if follower is None or not _uid(obj):
            return
        with self.lock:
            if _uid(follower.objects.get(_key(obj)) or {}) != _uid(obj):
                follower.expected[_key(obj)] = (time.monotonic(), obj)

    def gone(self, kind: str) -> list[dict[str, Any]]:
        """The last states of objects of ``kind`` deleted in the last few minutes (a pod that
        ended and went between two cycles: how it ended, which its deletion does not say)."""
        horizon = time.monotonic() - TOMBSTONE_SECONDS
        with self.lock:
            return [obj for at, obj in self.followers[kind].gone.values() if at >= horizon]

    def facts(self, kind: str, build: Callable[[dict[str, Any]], T]) -> list[T]:
        """``build`` of every object of ``kind``, remembered per object and rebuilt only when
        its resourceVersion changes: at thousands of running pods, turning each into facts was
        a good part of every cycle, though few change between two. ``build`` must return
        immutable facts and depend on nothing but the object; passing another ``build`` for the
        kind starts its memory afresh."""
        with self.lock:
            objects = list(self.followers[kind].objects.items())
        built_by, memory = self._facts.get(kind, (None, {}))
        if built_by is not build:
            memory = {}
        fresh: dict[str, tuple[str, Any]] = {}
        for key, obj in objects:
            version = (obj.get("metadata") or {}).get("resourceVersion", "")
            known = memory.get(key)
            if known is None or not version or known[0] != version:
                known = (version, build(obj))
            fresh[key] = known
        self._facts[kind] = (build, fresh)
        return [facts for _, facts in fresh.values()]
