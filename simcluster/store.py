"""The object store: every API object, one resourceVersion counter, and the watch history.

Objects are plain JSON-ready dicts and are *never modified after they are stored*: an update
stores a new dict. That lets lists and watch streams serialize them outside the lock.

Every write takes the next value of one cluster-wide counter as the object's
``metadata.resourceVersion`` and appends a :class:`Change` to a bounded history. A watch resumes
from any resourceVersion the history still covers; older ones are *expired* (410), as when etcd
has compacted them away.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass(frozen=True)
class Change:
    """One write as a watch sees it. ``previous`` is the object before a MODIFIED or DELETED."""

    resource_version: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str  # pods, nodes, jobs, namespaces, events
    object: dict[str, Any]
    previous: dict[str, Any] | None


class Expired(Exception):
    """The requested resourceVersion is older than the history keeps."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    """Objects by resource and key, guarded by :attr:`lock`; :attr:`changed` wakes watchers."""

    def __init__(self, history_size: int = 10_000) -> None:
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self._history: deque[Change] = deque()
        self._history_size = history_size
        self._revision = 0
        # The newest resourceVersion no longer in the history: watches from before it expire.
        self._compacted = 0

    @property
    def revision(self) -> int:
        """The cluster's current resourceVersion (a list's ``metadata.resourceVersion``)."""
        return self._revision

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """All objects of ``resource`` (in ``namespace`` when given), sorted by namespace/name."""
        objects = self._objects.get(resource, {})
        keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
        return [objects[k] for k in keys]

    def count(self, resource: str) -> int:
        return len(self._objects.get(resource, {}))

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` (created or replaced) under a new resourceVersion and record the change;
        returns the stored object.

        The caller hands over ``obj`` and must not touch it afterwards. Its ``metadata`` is
        copied, since callers build new versions as ``{**old, "status": …}``, sharing the old
        version's metadata, which must keep its own resourceVersion.
        """
        key = _key(obj)
        objects = self._objects.setdefault(resource, {})
        previous = objects.get(key)
        self._revision += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._revision)}}
        objects[key] = obj
        self._record(
            Change(self._revision, "MODIFIED" if previous else "ADDED", resource, obj, previous)
        )
        return obj

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete the object; its DELETED event carries a new resourceVersion, as on a cluster."""
        previous = self._objects.get(resource, {}).pop((namespace, name), None)
        if previous is None:
            return None
        self._revision += 1
        gone = {
            **previous,
            "metadata": {**previous["metadata"], "resourceVersion": str(self._revision)},
        }
        self._record(Change(self._revision, "DELETED", resource, gone, previous))
        return gone

    def changes_since(self, resource_version: int, resources: Iterable[str]) -> list[Change]:
        """Changes newer than ``resource_version`` to the given resources, oldest first.

        Raises :class:`Expired` when changes after ``resource_version`` were already dropped.
        """
        if resource_version < self._compacted:
            raise Expired(resource_version, self._compacted + 1)
        wanted = set(resources)
        # The history is ordered, so skip from the right end backwards to find the start quickly.
        result = []
        for change in reversed(self._history):
            if change.resource_version <= resource_version:
                break
            if change.resource in wanted:
                result.append(change)
        result.reverse()
        return result

    def compact(self) -> None:
        """Forget the whole history: a watch from any resourceVersion handed out so far expires.

        The revision moves on by one, so a list made afterwards is recent enough to watch from.
        """
        self._history.clear()
        self._revision += 1
        self._compacted = self._revision

    def _record(self, change: Change) -> None:
        self._history.append(change)
        while len(self._history) > self._history_size:
            self._compacted = self._history.popleft().resource_version
        self.changed.notify_all()


def _key(obj: dict[str, Any]) -> Key:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]
