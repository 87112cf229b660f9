"""Probes: hypothetical jobs whose estimated start the portal publishes.

A queue's terms show its current expected wait for the queue's default job: 1 GPU-equivalent,
default runtime, cheapest allowed class (docs/concepts.md, "Queues"). The glue adds one probe
per queue and team that may use it to ``Snapshot.probes``; ``plan`` answers in
``Plan.probe_estimates`` without letting the probes change anything for real jobs (see
``scheduler``, ``forecast`` and ``estimate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction

from queues.admission.capability import (
    CapabilityRequest,
    mig_profile_memory_gb,
    resolve_capability,
)
from queues.admission.snapshot import GpuClass, JobId, PendingJob, Queue, SharingMode

# Not a valid portal username (Django's allow letters, digits and @.+-_), so a probe never shares
# a real user's per-user limits.
PROBE_USER = "(probe)"


def default_probe(
    queue: Queue,
    team: str,
    now: datetime,
    probe_id: JobId,
    *,
    gpu_classes: Sequence[GpuClass],
    capability_classes: Sequence[CapabilityRequest],
) -> PendingJob | None:
    """The default job of ``queue`` for ``team``, submitted at ``now``, as a probe.

    One pod with one device: a whole GPU, or for a ``mig`` queue one slice of the smallest MIG
    profile its capability classes name, or for a ``time-sliced`` queue one replica; the queue's
    default runtime (``runtime_limit`` None) and runtime forecast; user ``PROBE_USER``;
    priority 0. Its capability is
    the queue's first capability class (in the queue's order; all of ``capability_classes`` by
    name when the queue accepts any) that matches the queue's cheapest allowed GPU class (rate
    card weight, then name) — the cheapest that any of them matches. Like a real job of that
    capability it may start on a dearer class that also matches when that is sooner.

    Returns None when no capability class fits (for example a ``mig`` queue none of whose
    capability classes names a MIG profile). Raises ``ValueError`` when ``team`` may not submit
    to ``queue``: an estimate for a team that cannot use the queue would be published for nobody.
    """
    if queue.teams and team not in queue.teams:
        raise ValueError(f"team {team} may not submit to queue {queue.name}")
    by_name = {c.name: c for c in capability_classes}
    names = queue.capability_classes or tuple(sorted(by_name))
    candidates = [by_name[name] for name in names if name in by_name]
    if queue.sharing is SharingMode.MIG:
        sliced = [c for c in candidates if c.mig_profile is not None]
        if not sliced:
            return None
        smallest = min((c.mig_profile or "" for c in sliced), key=_profile_size)
        candidates = [c for c in sliced if c.mig_profile == smallest]
    else:
        candidates = [c for c in candidates if c.mig_profile is None]
    allowed = [
        g.spec
        for g in sorted(gpu_classes, key=lambda g: (Fraction(g.weight), g.name))
        if not queue.gpu_classes or g.name in queue.gpu_classes
    ]
    matches = {c.name: resolve_capability(c, allowed).matches for c in candidates}
    for gpu in allowed:
        for capability in candidates:
            if gpu.name in matches[capability.name]:
                return PendingJob(
                    id=probe_id,
                    queue=queue.name,
                    team=team,
                    user=PROBE_USER,
                    capability=capability.name,
                    submitted_at=now,
                    forecast=queue.forecast,
                )
    return None


def _profile_size(profile: str) -> tuple[int, int, str]:
    """Order MIG profiles by compute slices, then memory (``1g.10gb`` < ``1g.20gb`` <
    ``2g.20gb``); a name that does not parse sorts last."""
    try:
        compute = int(profile.split("g.", 1)[0])
        return (compute, mig_profile_memory_gb(profile), profile)
    except ValueError:
        return (1 << 30, 1 << 30, profile)
