"""The three patch formats a Kubernetes client sends: JSON merge, strategic merge, JSON patch.

* ``application/merge-patch+json`` (RFC 7386): maps merge recursively, ``null`` deletes a key,
  lists are replaced.
* ``application/strategic-merge-patch+json``: as merge patch, but lists that Kubernetes declares
  with a *patch merge key* (conditions by ``type``, containers by ``name`` …) are merged element
  by element, and the ``$patch: replace|delete`` directives are honoured. Lists without a merge
  key (``spec.taints`` among them) are replaced, exactly as on a real API server.
* ``application/json-patch+json`` (RFC 6902): ``add``, ``remove``, ``replace``, ``test``,
  ``move``, ``copy``.
"""

from __future__ import annotations

import copy
from typing import Any

from simcluster.errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH)

# Lists merged by key in a strategic merge patch: the field's name → its patch merge key.
# (A subset of the Kubernetes API's ``x-kubernetes-patch-merge-key`` annotations.)
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


def apply_patch(target: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """Return a patched deep copy of ``target``; raise 400/415/422 ``ApiError`` on bad patches."""
    media = content_type.split(";")[0].strip().lower()
    if media == MERGE_PATCH:
        _require_object(patch)
        return merge_patch(copy.deepcopy(target), patch)
    if media == STRATEGIC_MERGE_PATCH:
        _require_object(patch)
        return strategic_merge_patch(copy.deepcopy(target), patch)
    if media == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        return json_patch(copy.deepcopy(target), patch)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(PATCH_TYPES)}",
    )


def _require_object(patch: Any) -> None:
    if not isinstance(patch, dict):
        raise bad_request(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``target`` is modified and returned)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Kubernetes' strategic merge patch for the fields listed in :data:`MERGE_KEYS`."""
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        if directive == "delete":
            return None
        if directive == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
        if not isinstance(target, dict):
            target = {}
        for key, value in patch.items():
            if key.startswith("$"):
                continue  # $setElementOrder, $retainKeys: ordering hints we need not honour
            if value is None:
                target.pop(key, None)
                continue
            merged = strategic_merge_patch(target.get(key), value, key)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        return target
    if isinstance(patch, list) and MERGE_KEYS.get(field):
        return _merge_list(target if isinstance(target, list) else [], patch, MERGE_KEYS[field])
    return copy.deepcopy(patch)


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, old in enumerate(result) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


# --- RFC 6902 -------------------------------------------------------------------------------------


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """Apply RFC 6902 operations in order; a failing ``test`` is 422 ``Invalid``."""
    document: Any = target
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request("the server rejected our request due to an error in our request")
        op, path = operation["op"], operation["path"]
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document = _remove(document, path)
        elif op == "replace":
            document = _remove(document, path)
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "test":
            if _get(document, path) != operation.get("value"):
                raise ApiError(422, f"testing value {path} failed: test failed")
        elif op in ("move", "copy"):
            value = copy.deepcopy(_get(document, operation["from"]))
            if op == "move":
                document = _remove(document, operation["from"])
            document = _add(document, path, value)
        else:
            raise bad_request(f"Unexpected kind: {op}")
    return document


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"JSON pointer must start with '/': {path}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise bad_request("cannot patch the document root")
    node = document
    for token in tokens[:-1]:
        node = _child(node, token, path)
    return node, tokens[-1]


def _child(node: Any, token: str, path: str) -> Any:
    try:
        if isinstance(node, list):
            return node[int(token)]
        return node[token]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(
            422, f"the server rejected our request: path {path} does not exist"
        ) from None


def _get(document: Any, path: str) -> Any:
    node = document
    for token in _tokens(path):
        node = _child(node, token, path)
    return node


def _add(document: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    parent, last = _parent(document, path)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, f"the server rejected our request: path {path} does not exist")
    return document


def _remove(document: Any, path: str) -> Any:
    parent, last = _parent(document, path)
    _child(parent, last, path)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return document
