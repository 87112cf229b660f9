"""Capability classes resolve to GPU classes, and say why the others do not (no database)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from queues.admission.capability import (
    CapabilityRequest,
    GpuClassSpec,
    mig_profile_memory_gb,
    parse_share,
    resolve_capability,
)

MIG = {"1g.10gb": Fraction(1, 7), "3g.40gb": Fraction(3, 7), "7g.80gb": Fraction(1)}
H100 = GpuClassSpec(
    "h100-80gb", 80, frozenset({"fp64", "tf32", "bf16", "fp16", "fp8", "int8"}), MIG, True, 4
)
A100 = GpuClassSpec(
    "a100-80gb", 80, frozenset({"fp64", "tf32", "bf16", "fp16", "int8"}), MIG, True, 3
)
L4 = GpuClassSpec("l4", 24, frozenset({"tf32", "bf16", "fp16", "fp8", "int8"}), {}, False, 2)
T4 = GpuClassSpec("t4", 16, frozenset({"fp16", "int8"}), {}, False, 1)
CLUSTER = [T4, L4, A100, H100]


def test_an_empty_request_matches_every_class():
    resolution = resolve_capability(CapabilityRequest("any-gpu"), CLUSTER)

    assert resolution.matches == ("t4", "l4", "a100-80gb", "h100-80gb")
    assert resolution.rejections == {}


def test_memory_and_precision_say_why_each_class_is_left_out():
    resolution = resolve_capability(
        CapabilityRequest("bf16-large", min_hbm_gb=40, precisions=frozenset({"bf16"})), CLUSTER
    )

    assert resolution.matches == ("a100-80gb", "h100-80gb")
    assert resolution.rejections == {
        "t4": ("HBM 16 GB < 40 GB required", "lacks bf16"),
        "l4": ("HBM 24 GB < 40 GB required",),
    }
    assert resolution.why_not("t4") == "HBM 16 GB < 40 GB required; lacks bf16"
    assert resolution.why_not("h100-80gb") == ""


def test_a_newer_compatible_gpu_satisfies_an_older_request():
    # Asked as "what an A100 can do": the H100 does all of it and more.
    request = CapabilityRequest(
        "a100-like", min_hbm_gb=80, precisions=frozenset({"tf32", "bf16"}), rdma=True, min_tier=3
    )

    assert resolve_capability(request, CLUSTER).matches == ("a100-80gb", "h100-80gb")


def test_fp8_rdma_and_tier_are_each_named():
    request = CapabilityRequest("big", precisions=frozenset({"fp8"}), rdma=True, min_tier=4)

    resolution = resolve_capability(request, CLUSTER)

    assert resolution.matches == ("h100-80gb",)
    assert resolution.rejections["a100-80gb"] == ("lacks fp8", "tier 3 < 4 required")
    assert resolution.rejections["l4"] == ("no RDMA", "tier 2 < 4 required")


def test_a_mig_request_needs_the_profile_and_checks_the_slices_memory():
    resolution = resolve_capability(
        CapabilityRequest("mig-big", mig_profile="1g.10gb", min_hbm_gb=20), CLUSTER
    )

    assert resolution.matches == ()
    assert resolution.rejections["t4"] == ("no MIG profile 1g.10gb (offers: none)",)
    assert resolution.rejections["h100-80gb"] == ("MIG slice 1g.10gb 10 GB < 20 GB required",)


def test_mig_profile_names_and_shares_are_parsed_strictly():
    assert mig_profile_memory_gb("3g.40gb") == 40
    assert parse_share("3/7") == Fraction(3, 7)
    assert parse_share(1) == 1
    with pytest.raises(ValueError, match="is not a MIG profile name"):
        mig_profile_memory_gb("big")
    with pytest.raises(ValueError, match="must be greater than 0 and at most 1"):
        parse_share("8/7")
