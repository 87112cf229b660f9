"""Label and field selectors, parsed and matched the way the API server does.

Label selectors support equality (``a=b``, ``a==b``, ``a!=b``) and set-based requirements
(``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``). Field selectors support ``=``, ``==`` and
``!=`` on the fields each resource allows; any other field is a 400 ``BadRequest``, as on a real
cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simcluster.errors import ApiError, bad_request

_SET_REQ = re.compile(r"^\s*(\S+?)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_REQ = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)\s*$")
_EXISTS_REQ = re.compile(r"^\s*(!?)\s*([^=!\s(),]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``key``, an operator (in, notin, exists, !exists) and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator == "in":
            return present and labels[self.key] in self.values
        # notin (and !=) match objects without the key too, as Kubernetes does.
        return not present or labels[self.key] not in self.values


LabelSelector = tuple[Requirement, ...]


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``?labelSelector=``; an empty or missing selector matches everything."""
    if not text or not text.strip():
        return ()
    requirements = []
    for part in _split_top_level(text):
        requirements.append(_parse_requirement(part))
    return tuple(requirements)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( … )``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _parse_requirement(part: str) -> Requirement:
    if match := _SET_REQ.match(part):
        values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
        return Requirement(match.group(1), match.group(2), values)
    if match := _EQ_REQ.match(part):
        operator = "notin" if match.group(2) == "!=" else "in"
        return Requirement(match.group(1), operator, (match.group(3),))
    if match := _EXISTS_REQ.match(part):
        return Requirement(match.group(2), "!exists" if match.group(1) else "exists")
    raise bad_request(f"unable to parse requirement: found '{part.strip()}', expected: identifier")


def labels_match(selector: LabelSelector, labels: dict[str, str] | None) -> bool:
    """True when every requirement of ``selector`` holds for ``labels``."""
    labels = labels or {}
    return all(requirement.matches(labels) for requirement in selector)


# --- field selectors -----------------------------------------------------------------------------

FieldGetter = Callable[[dict[str, Any]], str]


def _path(*keys: str) -> FieldGetter:
    def get(obj: dict[str, Any]) -> str:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


_META = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

# The fields each resource lets a client select on (the API server's field label conversions).
FIELDS: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        **_META,
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": _path("spec", "hostNetwork"),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "nodes": {**_META, "spec.unschedulable": _path("spec", "unschedulable")},
    "namespaces": {**_META, "status.phase": _path("status", "phase")},
    "jobs": {**_META, "status.successful": _path("status", "succeeded")},
    "secrets": {**_META, "type": _path("type")},
    "events": {
        **_META,
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
}


@dataclass(frozen=True)
class FieldRequirement:
    getter: FieldGetter
    value: str
    negate: bool

    def matches(self, obj: dict[str, Any]) -> bool:
        return (self.getter(obj) == self.value) != self.negate


FieldSelector = tuple[FieldRequirement, ...]


def parse_field_selector(resource: str, text: str | None) -> FieldSelector:
    """Parse ``?fieldSelector=`` for ``resource``; unknown fields raise 400 as on a real cluster."""
    if not text or not text.strip():
        return ()
    allowed = FIELDS.get(resource, _META)
    requirements = []
    for part in text.split(","):
        match = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if match is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, operator, value = match.groups()
        if field not in allowed:
            raise ApiError(400, f"field label not supported: {field}")
        requirements.append(FieldRequirement(allowed[field], value, operator == "!="))
    return tuple(requirements)


def fields_match(selector: FieldSelector, obj: dict[str, Any]) -> bool:
    return all(requirement.matches(obj) for requirement in selector)
