"""The few plausible log lines a simulated container prints.

Lines are derived from the pod and the (simulated) time it has run, so the same question always
gets the same answer: a banner, the devices it sees, a progress line every
:data:`STEP_SECONDS` simulated seconds (at most :data:`MAX_STEPS`), and how it ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from simcluster.clock import rfc3339_micro
from simcluster.objects import COMPLETION_INDEX

STEP_SECONDS = 30.0
MAX_STEPS = 20


@dataclass(frozen=True)
class LogContext:
    """What a container's log depends on; times are the clock's, ``elapsed`` is simulated."""

    pod: dict[str, Any]
    node: dict[str, Any] | None
    container: str
    started_at: datetime
    real_seconds_per_step: float
    elapsed_seconds: float
    exit_code: int | None
    reason: str | None
    finished_at: datetime | None


def log_lines(context: LogContext) -> list[tuple[datetime, str]]:
    """The log as (timestamp, line) pairs, oldest first."""
    pod = context.pod
    spec = pod.get("spec") or {}
    container: dict[str, Any] = next(
        (c for c in spec.get("containers") or [] if c["name"] == context.container), {}
    )
    start = context.started_at
    lines = [
        (start, f"[sim] container {context.container} started: {container.get('image', '')}"),
        (
            start,
            f"[sim] pod {pod['metadata']['namespace']}/{pod['metadata']['name']} on node "
            f"{spec.get('nodeName', '?')}",
        ),
        (start, f"[sim] {_devices(container, context.node)}"),
    ]
    index = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    if index is not None:
        lines.append((start, f"[sim] JOB_COMPLETION_INDEX={index}"))
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if command:
        lines.append((start, f"[sim] exec {command!r}"))
    steps = min(MAX_STEPS, int(context.elapsed_seconds // STEP_SECONDS))
    for step in range(1, steps + 1):
        moment = start + timedelta(seconds=step * context.real_seconds_per_step)
        loss = 2.5 * math.exp(-0.08 * step) + 0.1
        lines.append(
            (moment, f"step {step * 100}: loss={loss:.4f} throughput={1200 + 7 * step} samples/s")
        )
    if context.exit_code is not None and context.finished_at is not None:
        if context.reason == "OOMKilled":
            ending = "Killed"
        elif context.exit_code == 0:
            ending = "[sim] done: exit code 0"
        else:
            ending = f"[sim] error: exit code {context.exit_code}"
        lines.append((context.finished_at, ending))
    return lines


def _devices(container: dict[str, Any], node: dict[str, Any] | None) -> str:
    limits = ((container.get("resources") or {}).get("limits")) or {}
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    product = labels.get("nvidia.com/gpu.product", "no GPU product label")
    for resource, amount in limits.items():
        if resource == "nvidia.com/gpu":
            return f"visible GPUs: {amount} x {product}"
        if resource.startswith("nvidia.com/mig-"):
            profile = resource.removeprefix("nvidia.com/mig-")
            return f"visible MIG devices: {amount} x {profile} on {product}"
    return "no GPUs requested"


def render(
    lines: list[tuple[datetime, str]],
    *,
    timestamps: bool,
    tail: int | None,
    limit_bytes: int | None,
) -> str:
    """The ``log`` subresource's text: ``tailLines``, then ``timestamps``, then ``limitBytes``."""
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    text = "".join(
        f"{rfc3339_micro(moment) + ' ' if timestamps else ''}{line}\n" for moment, line in lines
    )
    if limit_bytes is not None:
        text = text.encode()[:limit_bytes].decode(errors="ignore")
    return text
