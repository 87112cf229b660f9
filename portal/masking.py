"""What looks secret, and how it is masked: the one rule every page, the API, exports, logs and
the audit log share, so that none of them shows what another hides.

A job's environment is stored as JSON: a name maps to a plain value (text) or to a reference to
a key of a Kubernetes Secret (``{"secret": "wandb", "key": "api-key"}``), whose value the
portal never sees. A plain value whose *name* looks secret (``WANDB_API_KEY``, ``DB_PASSWORD``)
is never shown to anybody, its owner included: wherever the environment is shown, such a value
is replaced by ``MASK``. Whether the policy lets a name carry a plain value at all is the
submission's business (``queues.jobs.requests``); what is shown depends on the name alone, so
that no policy change ever reveals a value stored before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Names of environment variables whose values are never shown (tokens, passwords, keys). Broad
# on purpose: masking a harmless value costs little, showing a secret cannot be undone.
SECRET_LOOKING_NAME = re.compile(r"(?i)(secret|token|passw|pwd|key|credential|auth|private|cert)")
MASK = "••••••"


def looks_secret(name: str) -> bool:
    """Whether an environment variable named ``name`` probably holds a secret."""
    return SECRET_LOOKING_NAME.search(name) is not None


def is_secret_reference(value: Any) -> bool:
    """Whether a stored environment value is a reference to a Secret's key (not a value)."""
    return (
        isinstance(value, Mapping)
        and set(value) == {"secret", "key"}
        and all(isinstance(v, str) for v in value.values())
    )


def shown_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """A stored environment as anybody may see it, by name: references as they are
    (``{"secret": …, "key": …}``), plain values of secret-looking names as ``MASK``, the rest
    as text. The API answers this; pages and exports show the same."""
    shown: dict[str, Any] = {}
    for name, value in sorted(env.items()):
        if is_secret_reference(value):
            shown[name] = {"secret": value["secret"], "key": value["key"]}
        elif looks_secret(name):
            shown[name] = MASK
        else:
            shown[name] = "" if value is None else str(value)
    return shown


def mask_secret_values(env: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` to be stored with every plain value of a secret-looking name replaced by
    ``MASK`` (references and other values kept as they are). Applying it twice changes
    nothing."""
    return {
        name: MASK
        if looks_secret(name) and not is_secret_reference(value) and value != MASK
        else value
        for name, value in env.items()
    }


def holds_secret_values(env: Mapping[str, Any]) -> bool:
    """Whether ``env`` keeps a plain value under a secret-looking name (one that is not the
    mask already)."""
    return mask_secret_values(env) != dict(env)
