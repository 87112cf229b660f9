"""Capability classes: what a job asks for instead of a GPU SKU.

Pure Python (no Django): the admission engine and the models share it.

A capability request names minimum HBM, required precisions, an optional MIG profile, RDMA and a
minimum performance tier. ``resolve_capability`` says which GPU classes satisfy it and, for every
other class, why not. A newer, compatible GPU satisfies an older request: nothing here pins a
product.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

PRECISIONS: tuple[str, ...] = ("fp64", "tf32", "bf16", "fp16", "fp8", "int8")

_MIG_PROFILE = re.compile(r"^(?P<compute>[1-9]\d*)g\.(?P<memory>[1-9]\d*)gb$")


def mig_profile_memory_gb(profile: str) -> int:
    """HBM of one MIG slice, read from its NVIDIA name (``3g.40gb`` → 40).

    Raises ``ValueError`` for a name that is not of the form ``<n>g.<m>gb``.
    """
    match = _MIG_PROFILE.match(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile name like '1g.10gb'")
    return int(match["memory"])


def parse_share(value: str | int | float | Fraction) -> Fraction:
    """A share of one GPU written as ``"1/7"``, ``"0.5"`` or ``1``; must be in (0, 1]."""
    try:
        share = Fraction(str(value)) if not isinstance(value, Fraction) else value
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"{value!r} is not a fraction like '1/7'") from exc
    if not 0 < share <= 1:
        raise ValueError(f"share {value} must be greater than 0 and at most 1")
    return share


@dataclass(frozen=True)
class GpuClassSpec:
    """One kind of accelerator as the cluster has it."""

    name: str
    hbm_gb: int
    precisions: frozenset[str]
    mig_profiles: Mapping[str, Fraction] = field(default_factory=dict)
    rdma: bool = False
    tier: int = 1


@dataclass(frozen=True)
class CapabilityRequest:
    """What a job needs from a GPU, whatever its product name."""

    name: str
    min_hbm_gb: int = 0
    precisions: frozenset[str] = frozenset()
    mig_profile: str | None = None
    rdma: bool = False
    min_tier: int = 0


@dataclass(frozen=True)
class Resolution:
    """Which GPU classes satisfy a request (in the order given) and why each other one does not."""

    matches: tuple[str, ...]
    rejections: Mapping[str, tuple[str, ...]]

    def why_not(self, gpu_class: str) -> str:
        """The reasons a class was rejected, joined for people; empty if it matches."""
        return "; ".join(self.rejections.get(gpu_class, ()))


def unmet_requirements(request: CapabilityRequest, gpu: GpuClassSpec) -> tuple[str, ...]:
    """Every requirement of ``request`` that ``gpu`` fails, in words with the numbers."""
    problems: list[str] = []
    if request.mig_profile is not None:
        if request.mig_profile not in gpu.mig_profiles:
            offered = ", ".join(sorted(gpu.mig_profiles)) or "none"
            problems.append(f"no MIG profile {request.mig_profile} (offers: {offered})")
            memory = None
        else:
            memory = mig_profile_memory_gb(request.mig_profile)
    else:
        memory = gpu.hbm_gb
    if memory is not None and memory < request.min_hbm_gb:
        what = f"MIG slice {request.mig_profile}" if request.mig_profile else "HBM"
        problems.append(f"{what} {memory} GB < {request.min_hbm_gb} GB required")
    missing = [p for p in PRECISIONS if p in request.precisions and p not in gpu.precisions]
    missing += sorted(p for p in request.precisions - gpu.precisions if p not in PRECISIONS)
    if missing:
        problems.append("lacks " + ", ".join(missing))
    if request.rdma and not gpu.rdma:
        problems.append("no RDMA")
    if gpu.tier < request.min_tier:
        problems.append(f"tier {gpu.tier} < {request.min_tier} required")
    return tuple(problems)


def resolve_capability(
    request: CapabilityRequest, gpu_classes: Iterable[GpuClassSpec]
) -> Resolution:
    """Resolve ``request`` against ``gpu_classes``: the matches and, for the rest, why not."""
    matches: list[str] = []
    rejections: dict[str, tuple[str, ...]] = {}
    for gpu in gpu_classes:
        problems = unmet_requirements(request, gpu)
        if problems:
            rejections[gpu.name] = problems
        else:
            matches.append(gpu.name)
    return Resolution(matches=tuple(matches), rejections=rejections)
