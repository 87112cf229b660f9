"""apply_policy on hostile files: every one refused with a clean error naming where, nothing
written (aliases, size, depth, non-finite and huge numbers, oversized text)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from queues.models import GpuClass, Team
from queues.policy.parse import MAX_POLICY_BYTES, MAX_POLICY_DEPTH, MAX_POLICY_TEXT
from tests.conftest import EXAMPLE_POLICY
from tests.queues.policy.test_policy import rejected

pytestmark = pytest.mark.django_db

BIG = "9" * 400


def example_with(old: str, new: str) -> str:
    text = EXAMPLE_POLICY.read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.fixture(autouse=True)
def nothing_written():
    yield
    assert GpuClass.objects.count() == 0
    assert Team.objects.count() == 0
    assert get_user_model().objects.count() == 0


def test_an_alias_bomb_is_refused_before_it_expands():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )

    assert rejected(bomb) == [
        "yaml: syntax error at line 2, column 8: aliases (*a) are not accepted: write the value out"
    ]


def test_a_file_over_the_size_limit_is_refused_unread():
    text = example_with("Any GPU at all.", "x" * MAX_POLICY_BYTES)

    assert rejected(text) == [
        f"yaml: the file is {len(text.encode()):,} bytes; at most {MAX_POLICY_BYTES:,}"
    ]


@pytest.mark.parametrize("depth", [MAX_POLICY_DEPTH + 1, 10_000])
def test_nesting_deeper_than_the_limit_is_refused(depth):
    text = "fair_share: " + "[" * depth + "]" * depth + "\n"

    assert rejected(text) == [
        f"yaml: syntax error at line 1, column {13 + MAX_POLICY_DEPTH - 1}: "
        f"nested more than {MAX_POLICY_DEPTH} levels deep"
    ]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "usage_half_life: 7d",
            "usage_half_life: .nan",
            "fair_share.usage_half_life: nan is not a finite number",
        ),
        ("hbm_gb: 80", "hbm_gb: .inf", "gpu_classes[h100-80gb].hbm_gb: inf is not a finite number"),
        (
            "hbm_gb: 80",
            "hbm_gb: -.inf",
            "gpu_classes[h100-80gb].hbm_gb: -inf is not a finite number",
        ),
        (
            "{nominal: 8, borrowing_limit: 8}",
            "{nominal: 1.0e+400, borrowing_limit: 8}",
            "teams[vision].quotas.h100-80gb.nominal: inf is not a finite number",
        ),
    ],
)
def test_numbers_that_are_not_finite_are_refused_naming_where(old, new, problem):
    assert rejected(example_with(old, new)) == [problem]


def test_a_description_over_the_text_limit_is_refused_naming_where():
    text = example_with("Any GPU at all.", "x" * 50_000)

    assert rejected(text) == [
        f"capability_classes[any-gpu].description: 50,000 characters; at most {MAX_POLICY_TEXT:,} in one value"
    ]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "hbm_gb: 80",
            f"hbm_gb: {BIG}",
            f"gpu_classes[h100-80gb].hbm_gb: {BIG[:40]}… (400 characters) is too large (at most 2,147,483,647)",
        ),
        (
            "hbm_gb: 80",
            "hbm_gb: 1e400",
            "gpu_classes[h100-80gb].hbm_gb: '1e400' is not a whole number",
        ),
        (
            "tier: 4",
            "tier: -3000000000",
            "gpu_classes[h100-80gb].tier: -3000000000 is too large (at most 2,147,483,647)",
        ),
        (
            "{nominal: 8, borrowing_limit: 8}",
            "{nominal: 1e400, borrowing_limit: 8}",
            "teams[vision].quotas.h100-80gb.nominal: '1e400' is too large (at most 9,999,999)",
        ),
        (
            "{nominal: 8, borrowing_limit: 8}",
            "{nominal: '1e400/3', borrowing_limit: 8}",
            "teams[vision].quotas.h100-80gb.nominal: '1e400/3' is not a number or a fraction like '3/7'",
        ),
        (
            "{nominal: 8, borrowing_limit: 8}",
            f"{{nominal: '{BIG}/3', borrowing_limit: 8}}",
            f"teams[vision].quotas.h100-80gb.nominal: '{BIG[:39]}… (404 characters) is too large (at most 9,999,999)",
        ),
        (
            "fair_share_weight: 2",
            "fair_share_weight: 100000",
            "teams[vision].fair_share_weight: 100000 is too large (at most 99,999)",
        ),
        (
            "fair_share_weight: 2",
            "fair_share_weight: 1e400",
            "teams[vision].fair_share_weight: '1e400' is too large (at most 99,999)",
        ),
    ],
)
def test_numbers_too_large_to_store_are_refused_naming_where(old, new, problem):
    assert rejected(example_with(old, new)) == [problem]
