"""How the test provider misbehaves for the next ID tokens, as the control API last set it."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

KNOBS = (
    "issuer",  # put this "iss" in ID tokens (the discovery document keeps the right one)
    "audience",  # put this "aud" in ID tokens
    "expired",  # true: ID tokens expired an hour ago
    "tamper",  # true: change the claims after signing (the signature no longer fits)
    "omit_groups",  # true: no groups claim
)


def knobs() -> dict[str, Any]:
    path = settings.STATE_DIR / "knobs.json"
    return json.loads(path.read_text()) if path.exists() else {}


def knobs_set(values: dict[str, Any]) -> None:
    unknown = set(values) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown knobs: {sorted(unknown)}")
    (settings.STATE_DIR / "knobs.json").write_text(json.dumps(values))
