"""core/v1 Events, recorded as kubelets and controllers do.

A repeat of the same event (same object, reason, message, source, field path) bumps the existing
one's ``count`` and ``lastTimestamp`` instead of adding another; only the newest ``max_events``
are kept (older ones are deleted, which watchers see).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from simcluster.clock import rfc3339
from simcluster.objects import new_uid
from simcluster.store import Store

EventKey = tuple[str, str, str, str, str | None]


class EventRecorder:
    """Writes Events into ``store`` (the caller holds the store's lock)."""

    def __init__(self, store: Store, max_events: int = 5_000) -> None:
        self.store = store
        self.max_events = max_events
        # Insertion-ordered: the first keys are the oldest events.
        self._events: dict[EventKey, tuple[str, str]] = {}
        self._sequence = 0

    def record(
        self,
        involved: dict[str, Any],
        reason: str,
        message: str,
        *,
        moment: datetime,
        type: str = "Normal",
        component: str = "kubelet",
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        """An event about ``involved`` (the object as stored). A kubelet's event names the
        pod's node as its ``source.host`` unless ``host`` says otherwise."""
        metadata = involved["metadata"]
        if component == "kubelet" and host is None:
            host = (involved.get("spec") or {}).get("nodeName")
        stamp = rfc3339(moment)
        key = (metadata["uid"], reason, message, component, field_path)
        if key in self._events and self._bump(key, stamp):
            return
        namespace = metadata.get("namespace") or "default"
        self._sequence += 1
        # Like the kubelet's "<object>.<hex nanoseconds>", unique per recorder.
        name = f"{metadata['name']}.{int(moment.timestamp()) * 10**9 + self._sequence:x}"
        self.store.put(
            "events",
            {
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": new_uid(),
                    "creationTimestamp": stamp,
                },
                "involvedObject": _reference(involved, field_path),
                "reason": reason,
                "message": message,
                "source": {"component": component, **({"host": host} if host else {})},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": type,
                "reportingComponent": component,
                "reportingInstance": host or "",
            },
        )
        self._events[key] = (namespace, name)
        self._prune()

    def _bump(self, key: EventKey, stamp: str) -> bool:
        existing = self.store.get("events", *self._events[key])
        if existing is None:
            return False
        self.store.put(
            "events",
            {
                **existing,
                "metadata": dict(existing["metadata"]),
                "count": existing["count"] + 1,
                "lastTimestamp": stamp,
            },
        )
        return True

    def _prune(self) -> None:
        while len(self._events) > self.max_events:
            oldest = next(iter(self._events))
            namespace, name = self._events.pop(oldest)
            self.store.remove("events", namespace, name)


def _reference(involved: dict[str, Any], field_path: str | None) -> dict[str, Any]:
    metadata = involved["metadata"]
    reference: dict[str, Any] = {
        "kind": involved.get("kind"),
        "name": metadata["name"],
        "uid": metadata["uid"],
        "apiVersion": involved.get("apiVersion"),
        "resourceVersion": metadata.get("resourceVersion", ""),
    }
    if metadata.get("namespace"):
        reference["namespace"] = metadata["namespace"]
    if field_path:
        reference["fieldPath"] = field_path
    return reference
