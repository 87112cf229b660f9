"""apply_policy on hostile files: every one refused with a clean error naming where, nothing
written (aliases, size, depth, non-finite and huge numbers, oversized text)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

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


@pytest.fixture
def admin_client_for():
    def make():
        admin = get_user_model().objects.create_user("root-admin", is_staff=True)
        client = Client()
        client.force_login(admin)
        return client

    return make


@pytest.fixture(autouse=True)
def nothing_written():
    yield
    assert GpuClass.objects.count() == 0
    assert Team.objects.count() == 0
    assert get_user_model().objects.exclude(username="root-admin").count() == 0


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


# Values YAML reads but Python cannot hold, and NUL characters (which PostgreSQL refuses): each a
# problem at its place, on the page, in the file and in `apply_policy --dry-run`.
UNREADABLE = [
    (
        "tier: 4",
        "tier: " + "9" * 5000,
        "yaml: at line {line}, column 11: '999999999999999999999999999999999999999… "
        "(5,002 characters) is not a number the policy can hold",
    ),
    (
        "tier: 4",
        "tier: 0x" + "f" * 5000,
        "gpu_classes[h100-80gb].tier: a number larger than any the policy holds",
    ),
    (
        "hbm_gb: 80",
        "hbm_gb: 2026-02-30",
        "yaml: at line {line}, column 13: '2026-02-30' is not a real date (day is out of range for month)",
    ),
    (
        "hbm_gb: 80",
        "hbm_gb: 2026-13-45",
        "yaml: at line {line}, column 13: '2026-13-45' is not a real date (month must be in 1..12)",
    ),
    (
        "Any GPU at all.",
        '"Any GPU\\0 at all."',
        "capability_classes[any-gpu].description: 'Any GPU\\x00 at all.' contains a NUL character",
    ),
]


def where(old: str, new: str, problem: str) -> tuple[str, str]:
    """The example policy with ``new`` for ``old``, and ``problem`` at the line it is on."""
    text = example_with(old, new)
    return text, problem.replace("{line}", str(text[: text.index(new)].count("\n") + 1))


@pytest.mark.parametrize(("old", "new", "problem"), UNREADABLE)
def test_values_python_cannot_hold_are_refused_naming_where(old, new, problem):
    text, problem = where(old, new, problem)
    assert rejected(text) == [problem]


@pytest.mark.parametrize(("old", "new", "problem"), UNREADABLE)
def test_the_command_prints_the_problem_not_a_traceback(tmp_path, old, new, problem):
    path = tmp_path / "policy.yaml"
    text, problem = where(old, new, problem)
    path.write_text(text)

    with pytest.raises(CommandError) as raised:
        call_command("apply_policy", str(path), "--dry-run", stdout=StringIO())

    assert str(raised.value) == (
        f"{path} was rejected, nothing was written (1 problem(s)):\n  {problem}"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "capability_classes:\n  - name: huge\n    min_hbm_gb: " + "9" * 5000 + "\n",
            "yaml: at line 3, column 17: '999999999999999999999999999999999999999… "
            "(5,002 characters) is not a number the policy can hold",
        ),
        (
            "capability_classes:\n  - name: dated\n    min_hbm_gb: 2026-02-30\n",
            "yaml: at line 3, column 17: '2026-02-30' is not a real date (day is out of range for month)",
        ),
        (
            'capability_classes:\n  - name: nul\n    description: "a\\0b"\n',
            "capability_classes[nul].description: 'a\\x00b' contains a NUL character",
        ),
    ],
)
def test_the_policy_page_shows_the_problem(admin_client_for, text, problem):
    page = admin_client_for().post("/manage/policy/capability_classes/new", {"text": text})

    assert page.status_code == 422
    assert page.context["problems"] == [problem]


def test_a_long_text_on_the_policy_page_is_refused_whole_never_cut(admin_client_for):
    # Before, the page cut what it was given at 100,000 characters and read the rest as if it
    # were all: here the cut would have fallen inside the description, 10,000 characters long at
    # most, and been refused for something the person did not write.
    text = "capability_classes:\n  - name: long\n    description: " + "x" * (MAX_POLICY_BYTES + 1)
    page = admin_client_for().post("/manage/policy/capability_classes/new", {"text": text})

    assert page.status_code == 422
    assert page.context["problems"] == [
        f"yaml: the file is {len(text):,} bytes; at most {MAX_POLICY_BYTES:,}"
    ]


def test_an_amount_in_fullwidth_digits_is_refused_naming_where():
    text = example_with("{nominal: 8, borrowing_limit: 8}", "{nominal: '８', borrowing_limit: 8}")

    assert rejected(text) == [
        "teams[vision].quotas.h100-80gb.nominal: '８': write the number in ASCII digits (0-9)"
    ]
