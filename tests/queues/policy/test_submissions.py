"""The policy's ``submissions`` section: which secret-looking environment variable names may carry
a plain value. Validated naming the field, applied with a diff and an audit entry, exported
back to the same file."""

from __future__ import annotations

import pytest
from auditlog.models import LogEntry

from queues.audit import AuditSource, audit_context
from queues.models import SubmissionSettings
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import PolicyError
from tests.conftest import EXAMPLE_POLICY

pytestmark = pytest.mark.django_db


def rejected(text: str) -> list[str]:
    with pytest.raises(PolicyError) as excinfo:
        policy_apply(text=text)
    return [str(p) for p in excinfo.value.problems]


def test_the_example_allows_two_names_that_hold_no_secret(example_policy):
    assert SubmissionSettings.objects.get().plain_env_names_allowed == [
        "HF_TOKEN_PATH",
        "TOKENIZERS_PARALLELISM",
    ]


def test_each_wrong_name_is_refused_naming_its_place_and_nothing_is_stored():
    problems = rejected(
        "submissions:\n"
        "  plain_env_names_allowed: [HF_TOKEN_PATH, 1_TOKEN, HF_HOME, GPUPORTAL_JOB_TOKEN, 7,"
        " HF_TOKEN_PATH]\n"
        "  plain_env_names: []\n"
    )

    assert problems == [
        "submissions.plain_env_names: unknown field (expected one of: plain_env_names_allowed)",
        "submissions.plain_env_names_allowed[1]: '1_TOKEN' is not a valid environment variable "
        "name (letters, digits, '_', '-', '.'; not starting with a digit)",
        "submissions.plain_env_names_allowed[2]: HF_HOME does not look secret: it may carry a "
        "plain value without this",
        "submissions.plain_env_names_allowed[3]: GPUPORTAL_JOB_TOKEN is reserved: the portal "
        "sets GPUPORTAL_…",
        "submissions.plain_env_names_allowed[4]: 7 is not text",
        "submissions.plain_env_names_allowed[5]: HF_TOKEN_PATH is listed twice",
    ]
    assert not SubmissionSettings.objects.exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("submissions: [HF_TOKEN_PATH]\n", "submissions: must be a mapping"),
        (
            "submissions:\n  plain_env_names_allowed: HF_TOKEN_PATH\n",
            "submissions.plain_env_names_allowed: 'HF_TOKEN_PATH' is not a list of environment "
            "variable names",
        ),
    ],
)
def test_a_section_of_the_wrong_shape_is_refused(text, problem):
    assert rejected(text) == [problem]


def test_applying_shows_the_change_and_audits_it_with_names_only():
    with audit_context(actor=None, source=AuditSource.FILE):
        created = policy_apply(text="submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH]\n")
        changed = policy_apply(
            text="submissions:\n  plain_env_names_allowed: [TOKENIZERS_PARALLELISM, HF_TOKEN_PATH]\n"
        )
        again = policy_apply(
            text="submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH, TOKENIZERS_PARALLELISM]\n"
        )

    assert created.render().splitlines() == ["+ submissions settings: created"]
    assert changed.render().splitlines() == [
        "~ submissions settings: changed",
        "    plain_env_names_allowed: [HF_TOKEN_PATH] → [HF_TOKEN_PATH, TOKENIZERS_PARALLELISM]",
    ]
    assert again.render() == "No changes: the database already matches the file."
    entries = LogEntry.objects.get_for_model(SubmissionSettings).order_by("timestamp")
    assert [e.additional_data["source"] for e in entries] == ["file", "file"]
    assert "TOKENIZERS_PARALLELISM" in entries.last().changes_str


def test_a_file_without_the_section_leaves_the_allowance_alone(example_policy):
    policy_apply(text="fair_share:\n  usage_half_life: 3d\n")

    assert SubmissionSettings.objects.get().plain_env_names_allowed == [
        "HF_TOKEN_PATH",
        "TOKENIZERS_PARALLELISM",
    ]


def test_export_writes_the_section_back_and_applying_it_changes_nothing(example_policy):
    text = dump_policy(policy_current())

    assert (
        "submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH, TOKENIZERS_PARALLELISM]\n"
    ) in text
    assert not policy_apply(text=text).changed
    assert "submissions" in EXAMPLE_POLICY.read_text()


def test_an_empty_allowance_round_trips():
    policy_apply(text="submissions: {}\n")

    assert SubmissionSettings.objects.get().plain_env_names_allowed == []
    assert "submissions:\n  plain_env_names_allowed: []\n" in dump_policy(policy_current())
