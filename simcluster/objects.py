"""Building, defaulting and validating API objects, as the API server and controllers would.

Pure functions over JSON-ready dicts: no state, no clock of their own (``now`` is passed in).
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
import uuid
from datetime import datetime
from typing import Any

from simcluster.clock import rfc3339
from simcluster.errors import ApiError, bad_request, invalid
from simcluster.nodes import NodeSpec
from simcluster.quantity import QuantityError, parse_quantity
from simcluster.scheduler import UNSCHEDULABLE_TAINT

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_LEGACY_JOB_NAME_LABEL = "job-name"
_LEGACY_CONTROLLER_UID_LABEL = "controller-uid"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
# The tolerations the DefaultTolerationSeconds admission plugin adds to every pod.
_DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
_STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi"}


def new_uid() -> str:
    return str(uuid.uuid4())


def object_meta(
    metadata: dict[str, Any], *, name: str, namespace: str | None, now: datetime
) -> dict[str, Any]:
    """The server-set metadata of a new object on top of what the client sent."""
    meta = {k: v for k, v in metadata.items() if k not in ("resourceVersion", "uid", "selfLink")}
    meta["name"] = name
    if namespace is not None:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = rfc3339(now)
    meta.pop("deletionTimestamp", None)
    meta.pop("deletionGracePeriodSeconds", None)
    return meta


def require_object(body: Any, kind: str, api_version: str) -> dict[str, Any]:
    """The request body as an object of ``kind``; 400 ``BadRequest`` otherwise."""
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request is not a {kind} object")
    if body.get("kind") not in (None, kind):
        raise bad_request(
            f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
            f"API version ({api_version})"
            if body.get("apiVersion") not in (None, api_version)
            else f"the kind in the data ({body.get('kind')}) does not match the expected kind "
            f"({kind})"
        )
    if body.get("apiVersion") not in (None, api_version):
        raise bad_request(
            f"the API version in the data ({body['apiVersion']}) does not match the expected "
            f"API version ({api_version})"
        )
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_request("metadata must be an object")
    return body


def object_name(body: dict[str, Any], kind: str, group: str, suffix: str) -> str:
    """``metadata.name``, or ``generateName`` plus ``suffix``; 422 when neither is given."""
    metadata = body.get("metadata") or {}
    if metadata.get("name"):
        return str(metadata["name"])
    if metadata.get("generateName"):
        return f"{metadata['generateName']}{suffix}"
    raise invalid(
        kind, "", group, [("metadata.name", "Required value: name or generateName is required")]
    )


def check_namespace(body: dict[str, Any], namespace: str) -> None:
    """400 when the body names another namespace than the URL (the API server's own check)."""
    given = (body.get("metadata") or {}).get("namespace")
    if given and given != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


# --- namespaces -------------------------------------------------------------------------------


def build_namespace(body: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A new ``Namespace`` (phase Active) from a create request; 422 for an invalid name."""
    body = require_object(body, "Namespace", "v1")
    name = object_name(body, "Namespace", "", "")
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise invalid(
            "Namespace",
            name,
            "",
            [("metadata.name", f'Invalid value: "{name}": {_DNS_LABEL_HELP}')],
        )
    meta = object_meta(body.get("metadata") or {}, name=name, namespace=None, now=now)
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": name}
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


# --- secrets ------------------------------------------------------------------------------------

# The API server's rules for a Secret (k8s.io/kubernetes pkg/apis/core/validation): keys are
# "config keys", the data together at most 1 MiB.
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_CONFIG_KEY_HELP = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
MAX_SECRET_BYTES = 1024 * 1024
_BASE64 = re.compile(r"[A-Za-z0-9+/]")


def build_secret(namespace: str, body: Any, now: datetime, suffix: str) -> dict[str, Any]:
    """A new ``Secret`` from a create request: ``stringData`` merged into ``data`` (base64, as
    the API server stores and answers it), ``type`` defaulting to ``Opaque``. 400 for data that
    is not base64 text, 422 for an invalid name or key, or more than 1 MiB of data."""
    body = require_object(body, "Secret", "v1")
    check_namespace(body, namespace)
    name = object_name(body, "Secret", "", suffix)
    data = _secret_data(body.get("data"))
    string_data = body.get("stringData") or {}
    if not isinstance(string_data, dict) or not all(
        isinstance(v, str) for v in string_data.values()
    ):
        raise _undecodable("stringData: expected a map of strings")
    for key, text in string_data.items():
        data[str(key)] = text.encode()
    causes: list[tuple[str, str]] = []
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": {_DNS_SUBDOMAIN_HELP}'))
    for key in sorted(data):
        if len(key) > 253 or not _CONFIG_KEY.match(key):
            causes.append((f"data[{key}]", f'Invalid value: "{key}": {_CONFIG_KEY_HELP}'))
        elif key in (".", "..") or key.startswith(".."):
            rule = f"must not be '{key}'" if key in (".", "..") else "must not start with '..'"
            causes.append((f"data[{key}]", f'Invalid value: "{key}": {rule}'))
    if sum(len(v) for v in data.values()) > MAX_SECRET_BYTES:
        causes.append(("data", f"Too long: must have at most {MAX_SECRET_BYTES} bytes"))
    kind = body.get("type") or "Opaque"
    if not isinstance(kind, str):
        raise _undecodable("type: expected a string")
    if causes:
        raise invalid("Secret", name, "", causes)
    secret: dict[str, Any] = {
        "kind": "Secret",
        "apiVersion": "v1",
        "metadata": object_meta(
            body.get("metadata") or {}, name=name, namespace=namespace, now=now
        ),
        "type": kind,
    }
    if data:
        secret["data"] = {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}
    if body.get("immutable") is not None:
        secret["immutable"] = bool(body["immutable"])
    return secret


def _secret_data(raw: Any) -> dict[str, bytes]:
    """``data`` as bytes; text that is not base64 is refused as the API server's JSON decoder
    refuses it (400)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _undecodable("data: expected a map of base64 strings")
    data: dict[str, bytes] = {}
    for key, text in raw.items():
        if not isinstance(text, str):
            raise _undecodable(f"data[{key}]: expected a base64 string")
        try:
            data[str(key)] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            at = next(
                (i for i, c in enumerate(text) if not _BASE64.match(c) and c != "="),
                len(text) - len(text) % 4,
            )
            raise _undecodable(f"illegal base64 data at input byte {at}") from None
    return data


def _undecodable(reason: str) -> ApiError:
    return bad_request(f'Secret in version "v1" cannot be handled as a Secret: {reason}')


# --- nodes --------------------------------------------------------------------------------------


def build_node(spec: NodeSpec, number: int, now: datetime) -> dict[str, Any]:
    """A ``Node`` as a kubelet with the NVIDIA device plugin would register it."""
    stamp = rfc3339(now)
    conditions = [
        _node_condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            stamp,
        ),
        _node_condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            stamp,
        ),
        _node_condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            stamp,
        ),
        _node_condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", stamp),
    ]
    for extra in spec.conditions:
        conditions = [c for c in conditions if c["type"] != extra["type"]]
        conditions.append(
            _node_condition(
                extra["type"],
                extra["status"],
                extra.get("reason", ""),
                extra.get("message", ""),
                stamp,
            )
        )
    node: dict[str, Any] = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": spec.name,
            "uid": new_uid(),
            "creationTimestamp": stamp,
            "labels": dict(spec.labels),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **spec.annotations,
            },
        },
        "spec": {"podCIDR": f"10.244.{number}.0/24", "podCIDRs": [f"10.244.{number}.0/24"]},
        "status": {
            "capacity": dict(spec.capacity),
            "allocatable": dict(spec.allocatable),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{number // 250}.{number % 250 + 2}"},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, spec.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, spec.name)),
                "bootID": new_uid(),
                "kernelVersion": "6.1.0-28-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "v1.33.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if spec.unschedulable:
        node["spec"]["unschedulable"] = True
    if spec.taints:
        node["spec"]["taints"] = [dict(t) for t in spec.taints]
    return sync_unschedulable_taint(node, now)


def _node_condition(
    kind: str, status: str, reason: str, message: str, stamp: str
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def sync_unschedulable_taint(node: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Add or drop the ``node.kubernetes.io/unschedulable`` taint to follow ``spec.unschedulable``
    (the node lifecycle controller's job on a real cluster)."""
    spec = node.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT]
    if spec.get("unschedulable"):
        taints.append(
            {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)}
        )
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    return node


# --- pods and jobs: validation ------------------------------------------------------------------


def pod_spec_causes(spec: Any, prefix: str) -> list[tuple[str, str]]:
    """The API server's checks that a job manifest can plausibly get wrong, as 422 causes."""
    causes: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        return [(prefix, "Required value")]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append((f"{prefix}.containers", "Required value"))
    for number, container in enumerate(containers or []):
        where = f"{prefix}.containers[{number}]"
        if not isinstance(container, dict):
            causes.append((where, "Invalid value: must be an object"))
            continue
        if not container.get("name"):
            causes.append((f"{where}.name", "Required value"))
        elif not _DNS_LABEL.match(str(container["name"])):
            causes.append(
                (f"{where}.name", f'Invalid value: "{container["name"]}": {_DNS_LABEL_HELP}')
            )
        if not container.get("image"):
            causes.append((f"{where}.image", "Required value"))
        for field in ("command", "args"):
            value = container.get(field)
            if value is not None and (
                not isinstance(value, list) or not all(isinstance(v, str) for v in value)
            ):
                causes.append((f"{where}.{field}", "Invalid value: must be a list of strings"))
        causes.extend(_resource_causes(container.get("resources") or {}, f"{where}.resources"))
        causes.extend(_env_causes(container, where))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        causes.append((f"{prefix}.terminationGracePeriodSeconds", "Invalid value: must be >= 0"))
    return causes


_ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ENV_VAR_NAME_HELP = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
    "or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
_VALUE_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")


def _env_causes(container: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """The API server's checks of a container's ``env`` and ``envFrom`` (names, exactly one
    source per ``valueFrom``, the names and keys a Secret reference gives). A variable's value
    is never quoted back."""
    causes: list[tuple[str, str]] = []
    for number, var in enumerate(container.get("env") or []):
        at = f"{where}.env[{number}]"
        if not isinstance(var, dict):
            causes.append((at, "Invalid value: must be an object"))
            continue
        name = var.get("name")
        if not name:
            causes.append((f"{at}.name", "Required value"))
        elif not isinstance(name, str) or not _ENV_VAR_NAME.match(name):
            causes.append((f"{at}.name", f'Invalid value: "{name}": {_ENV_VAR_NAME_HELP}'))
        source = var.get("valueFrom")
        if source is None:
            continue
        if var.get("value"):
            causes.append(
                (
                    f"{at}.valueFrom",
                    'Invalid value: "": may not be specified when `value` is not empty',
                )
            )
        given = [k for k in _VALUE_SOURCES if isinstance(source, dict) and source.get(k)]
        if len(given) != 1:
            causes.append(
                (
                    f"{at}.valueFrom",
                    'Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, '
                    "`configMapKeyRef` or `secretKeyRef`"
                    if not given
                    else 'Invalid value: "": may not have more than one field specified at a time',
                )
            )
        elif given[0] == "secretKeyRef":
            ref = source["secretKeyRef"]
            causes.extend(_secret_name_causes(ref.get("name"), f"{at}.valueFrom.secretKeyRef.name"))
            key = ref.get("key")
            if not key:
                causes.append((f"{at}.valueFrom.secretKeyRef.key", "Required value"))
            elif not isinstance(key, str) or len(key) > 253 or not _CONFIG_KEY.match(key):
                causes.append(
                    (
                        f"{at}.valueFrom.secretKeyRef.key",
                        f'Invalid value: "{key}": {_CONFIG_KEY_HELP}',
                    )
                )
    for number, source in enumerate(container.get("envFrom") or []):
        at = f"{where}.envFrom[{number}]"
        ref = source.get("secretRef") if isinstance(source, dict) else None
        if isinstance(ref, dict):
            causes.extend(_secret_name_causes(ref.get("name"), f"{at}.secretRef.name"))
        elif not isinstance(source, dict) or not source.get("configMapRef"):
            causes.append(
                (at, 'Invalid value: "": must specify one of: `configMapRef` or `secretRef`')
            )
    return causes


def _secret_name_causes(name: Any, field: str) -> list[tuple[str, str]]:
    if not name:
        return [(field, "Required value")]
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [(field, f'Invalid value: "{name}": {_DNS_SUBDOMAIN_HELP}')]
    return []


def _resource_causes(resources: dict[str, Any], where: str) -> list[tuple[str, str]]:
    causes = []
    parsed: dict[str, dict[str, Any]] = {}
    for section in ("limits", "requests"):
        parsed[section] = {}
        for resource, amount in (resources.get(section) or {}).items():
            try:
                parsed[section][resource] = parse_quantity(amount)
            except QuantityError as error:
                causes.append(
                    (f"{where}.{section}[{resource}]", f'Invalid value: "{amount}": {error}')
                )
    for resource, amount in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        if resource in _STANDARD_RESOURCES:
            if limit is not None and amount > limit:
                causes.append(
                    (
                        f"{where}.requests",
                        f'Invalid value: "{resources["requests"][resource]}": must be less than or '
                        f"equal to {resource} limit of {resources['limits'][resource]}",
                    )
                )
            continue
        if limit is None:
            causes.append(
                (
                    f"{where}.limits",
                    "Required value: Limit must be set for non overcommitable resources",
                )
            )
        elif limit != amount:
            causes.append(
                (
                    f"{where}.requests[{resource}]",
                    f'Invalid value: "{resources["requests"][resource]}": must be equal to '
                    f"{resource} limit of {resources['limits'][resource]}",
                )
            )
    for section in ("limits", "requests"):
        for resource, amount in parsed[section].items():
            if amount < 0:
                causes.append(
                    (
                        f"{where}.{section}[{resource}]",
                        "Invalid value: must be greater than or equal to 0",
                    )
                )
            elif resource not in _STANDARD_RESOURCES and amount.denominator != 1:
                causes.append(
                    (f"{where}.{section}[{resource}]", "Invalid value: must be an integer")
                )
    return causes


def build_job(namespace: str, body: dict[str, Any], now: datetime, suffix: str) -> dict[str, Any]:
    """A new ``Job`` with the API server's defaults (selector, labels, pod template defaults)."""
    body = require_object(body, "Job", "batch/v1")
    check_namespace(body, namespace)
    name = object_name(body, "Job", "batch", suffix)
    causes: list[tuple[str, str]] = []
    if len(name) > 63:
        causes.append(
            ("metadata.name", f'Invalid value: "{name}": must be no more than 63 characters')
        )
    elif not _DNS_SUBDOMAIN.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": {_DNS_SUBDOMAIN_HELP}'))
    spec = copy.deepcopy(body.get("spec"))
    if not isinstance(spec, dict):
        raise invalid("Job", name, "batch", [("spec.template", "Required value")])
    causes.extend(_job_spec_causes(spec))
    template = spec.get("template") or {}
    if isinstance(template, dict):
        causes.extend(pod_spec_causes(template.get("spec"), "spec.template.spec"))
    if causes:
        raise invalid("Job", name, "batch", causes)

    meta = object_meta(body.get("metadata") or {}, name=name, namespace=namespace, now=now)
    meta["generation"] = 1
    uid = meta["uid"]
    selector_labels = {CONTROLLER_UID_LABEL: uid}
    template_meta = copy.deepcopy(template.get("metadata") or {})
    template_meta["labels"] = {
        **(template_meta.get("labels") or {}),
        CONTROLLER_UID_LABEL: uid,
        JOB_NAME_LABEL: name,
        _LEGACY_CONTROLLER_UID_LABEL: uid,
        _LEGACY_JOB_NAME_LABEL: name,
    }
    if not meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    if "parallelism" not in spec and completions is None:
        completions = 1
    defaulted = {
        **spec,
        "parallelism": parallelism,
        "backoffLimit": spec.get("backoffLimit", 6),
        "completionMode": spec.get("completionMode", "NonIndexed"),
        "suspend": bool(spec.get("suspend", False)),
        "podReplacementPolicy": spec.get("podReplacementPolicy", "TerminatingOrFailed"),
        "manualSelector": spec.get("manualSelector", False) or None,
        "selector": {"matchLabels": selector_labels},
        "template": {"metadata": template_meta, "spec": default_pod_spec(template["spec"])},
    }
    if completions is not None:
        defaulted["completions"] = completions
    defaulted = {k: v for k, v in defaulted.items() if v is not None}
    return {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": meta,
        "spec": defaulted,
        "status": {},
    }


def _job_spec_causes(spec: dict[str, Any]) -> list[tuple[str, str]]:
    causes = []
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            causes.append(
                (f"spec.{field}", f"Invalid value: {value}: must be greater than or equal to 0")
            )
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        causes.append(
            ("spec.activeDeadlineSeconds", f"Invalid value: {deadline}: must be greater than 0")
        )
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(
            (
                "spec.completionMode",
                f'Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"',
            )
        )
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(("spec.completions", "Required value: when completion mode is Indexed"))
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(("spec.template", "Required value"))
        return causes
    policy = (template.get("spec") or {}).get("restartPolicy", "Always")
    if policy not in ("OnFailure", "Never"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"',
            )
        )
    return causes


def default_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The API server's pod defaults (scheduler, grace period, container defaults, requests)."""
    result = copy.deepcopy(spec)
    result.setdefault("restartPolicy", "Always")
    result.setdefault("terminationGracePeriodSeconds", 30)
    result.setdefault("dnsPolicy", "ClusterFirst")
    result.setdefault("schedulerName", "default-scheduler")
    result.setdefault("securityContext", {})
    result.setdefault("enableServiceLinks", True)
    result.setdefault("preemptionPolicy", "PreemptLowerPriority")
    result.setdefault("priority", 0)
    for container in result.get("containers") or []:
        _default_container(container)
    for container in result.get("initContainers") or []:
        _default_container(container)
    return result


def _default_container(container: dict[str, Any]) -> None:
    image = str(container.get("image", ""))
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    latest = not tagged or image.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        # Requests default to limits for every resource that has a limit but no request.
        resources["requests"] = {**limits, **(resources.get("requests") or {})}


def build_pod(namespace: str, body: dict[str, Any], now: datetime, suffix: str) -> dict[str, Any]:
    """A new bare ``Pod`` (created directly, not by a Job)."""
    body = require_object(body, "Pod", "v1")
    check_namespace(body, namespace)
    name = object_name(body, "Pod", "", suffix)
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise invalid(
            "Pod", name, "", [("metadata.name", f'Invalid value: "{name}": {_DNS_SUBDOMAIN_HELP}')]
        )
    causes = pod_spec_causes(body.get("spec"), "spec")
    if causes:
        raise invalid("Pod", name, "", causes)
    meta = object_meta(body.get("metadata") or {}, name=name, namespace=namespace, now=now)
    return _pod_shell(meta, default_pod_spec(body["spec"]))


def pod_for_job(job: dict[str, Any], index: int | None, name: str, now: datetime) -> dict[str, Any]:
    """The pod a Job controller creates from the Job's template (for ``index`` when Indexed)."""
    template = job["spec"]["template"]
    job_meta = job["metadata"]
    labels = dict(template["metadata"].get("labels") or {})
    annotations = dict(template["metadata"].get("annotations") or {})
    spec = copy.deepcopy(template["spec"])
    if index is not None:
        labels[COMPLETION_INDEX] = str(index)
        annotations[COMPLETION_INDEX] = str(index)
        spec["hostname"] = f"{job_meta['name']}-{index}"
        for container in spec.get("containers") or []:
            container["env"] = [
                *(container.get("env") or []),
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {
                        "fieldRef": {
                            "apiVersion": "v1",
                            "fieldPath": f"metadata.labels['{COMPLETION_INDEX}']",
                        }
                    },
                },
            ]
    generate = f"{job_meta['name']}-{index}-" if index is not None else f"{job_meta['name']}-"
    meta = {
        "name": name,
        "generateName": generate,
        "namespace": job_meta["namespace"],
        "uid": new_uid(),
        "creationTimestamp": rfc3339(now),
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job_meta["name"],
                "uid": job_meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations:
        meta["annotations"] = annotations
    return _pod_shell(meta, spec)


def _pod_shell(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    spec["tolerations"] = [*(spec.get("tolerations") or []), *_missing_default_tolerations(spec)]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": qos_class(spec)},
    }


def _missing_default_tolerations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    present = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations") or []}
    return [t for t in _DEFAULT_TOLERATIONS if (t["key"], t["effect"]) not in present]


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed when every container's cpu and memory requests equal its limits."""
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any((r.get("requests") or r.get("limits")) for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                return "Burstable"
    return "Guaranteed"


def parse_deletion(body: Any, query: dict[str, str]) -> tuple[str | None, int | None, bool]:
    """``propagationPolicy``, ``gracePeriodSeconds`` and dry run of a delete, from the query string
    or a ``DeleteOptions`` body (the body wins, as on a real API server)."""
    if body is not None and not isinstance(body, dict):
        raise bad_request("the body of a delete must be DeleteOptions")
    body = body or {}
    propagation = body.get("propagationPolicy") or query.get("propagationPolicy")
    if propagation not in (None, "Orphan", "Background", "Foreground"):
        raise ApiError(
            422,
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            f'"{propagation}": supported values: "Foreground", "Background", "Orphan", "nil"',
        )
    grace_text = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    grace = None
    if grace_text is not None:
        try:
            grace = max(0, int(grace_text))
        except (TypeError, ValueError):
            raise bad_request(f"invalid gracePeriodSeconds: {grace_text!r}") from None
    dry_run = bool(body.get("dryRun") or query.get("dryRun"))
    return propagation, grace, dry_run
