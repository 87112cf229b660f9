"""The kubeconfig that points the official client (or kubectl) at the simulated cluster."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

CONTEXT_NAME = "gpuportal-sim"
USER_NAME = "gpuportal-sim-admin"


def kubeconfig_dict(server_url: str, token: str, *, name: str = CONTEXT_NAME) -> dict[str, Any]:
    """A kubeconfig with one cluster (``server_url``), one token user and one current context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server_url}}],
        "users": [{"name": USER_NAME, "user": {"token": token}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": USER_NAME, "namespace": "default"}}
        ],
        "current-context": name,
    }


def write_kubeconfig(
    path: str | Path, server_url: str, token: str, *, name: str = CONTEXT_NAME
) -> Path:
    """Write the kubeconfig atomically, readable only by its owner (it holds a token)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server_url, token, name=name), sort_keys=False)
    descriptor, temporary = tempfile.mkstemp(prefix=".kubeconfig-", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
