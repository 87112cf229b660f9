"""Kubernetes Secrets as a job's pods use them: a reference to one key (``secretKeyRef``) or to a
whole Secret (``envFrom``), and what the kubelet says when one is missing.

The portal never reads a Secret: it only names them in the Job it creates, and the kubelet
resolves them when it starts the container. A referenced Secret or key that does not exist
leaves the container waiting with reason ``CreateContainerConfigError`` and one of the
kubelet's messages, which ``missing_secret`` reads back (pure functions, like ``pods``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONFIG_ERROR = "CreateContainerConfigError"
# The kubelet's words (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables): a Secret the
# API server does not have is its NotFound error; a key the Secret lacks is its own message.
_SECRET_NOT_FOUND = re.compile(r'secrets? "(?P<secret>[^"]+)" not found')
_KEY_NOT_FOUND = re.compile(
    r"couldn't find key (?P<key>\S+) in Secret (?P<namespace>[^/\s]+)/(?P<secret>\S+)"
)


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """The value of one key of a Secret in the job's namespace (``valueFrom.secretKeyRef``)."""

    secret: str
    key: str

    def to_json(self) -> dict[str, str]:
        return {"secret": self.secret, "key": self.key}


# A variable's value as a request and a launch carry it: text, or a Secret's key.
EnvValue = str | SecretKeyRef


def env_of_json(data: Mapping[str, Any]) -> dict[str, EnvValue]:
    """A stored environment (JSON) as values: ``{"secret", "key"}`` objects become
    ``SecretKeyRef`` (one already is kept); anything else is text."""
    env: dict[str, EnvValue] = {}
    for name, value in data.items():
        if isinstance(value, SecretKeyRef):
            env[str(name)] = value
        elif (
            isinstance(value, Mapping)
            and set(value) == {"secret", "key"}
            and all(isinstance(v, str) for v in value.values())
        ):
            env[str(name)] = SecretKeyRef(value["secret"], value["key"])
        else:
            env[str(name)] = "" if value is None else str(value)
    return env


def env_json(env: Mapping[str, EnvValue]) -> dict[str, Any]:
    """Values as stored (JSON): a ``SecretKeyRef`` as ``{"secret", "key"}``."""
    return {
        name: value.to_json() if isinstance(value, SecretKeyRef) else value
        for name, value in env.items()
    }


def env_entries(env: Mapping[str, EnvValue]) -> list[dict[str, Any]]:
    """A container's ``env``, by name: ``value`` for text, ``valueFrom.secretKeyRef`` for a
    Secret's key (not optional: a missing one keeps the container from starting, so a job
    never runs without a value it asked for)."""
    entries: list[dict[str, Any]] = []
    for name, value in sorted(env.items()):
        if isinstance(value, SecretKeyRef):
            entries.append(
                {
                    "name": name,
                    "valueFrom": {"secretKeyRef": {"name": value.secret, "key": value.key}},
                }
            )
        else:
            entries.append({"name": name, "value": value})
    return entries


def env_from_entries(secrets: list[str]) -> list[dict[str, Any]]:
    """A container's ``envFrom``: every key of each Secret as a variable."""
    return [{"secretRef": {"name": name}} for name in secrets]


@dataclass(frozen=True, slots=True)
class MissingSecret:
    """A Secret (``key`` empty) or a key of one that a pod references and the cluster lacks."""

    namespace: str
    secret: str
    key: str = ""


def missing_secret(message: str, *, namespace: str) -> MissingSecret | None:
    """What the kubelet's ``CreateContainerConfigError`` message says is missing, if it is a
    Secret or one of its keys (None for any other cause)."""
    if found := _KEY_NOT_FOUND.search(message):
        return MissingSecret(found["namespace"], found["secret"], found["key"])
    if found := _SECRET_NOT_FOUND.search(message):
        return MissingSecret(namespace, found["secret"])
    return None
