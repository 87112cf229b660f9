"""The one rule for what looks secret and how it is shown (pages, API, admin, exports)."""

from __future__ import annotations

import pytest

from portal.masking import MASK, holds_secret_values, looks_secret, mask_secret_values, shown_env


@pytest.mark.parametrize(
    "name",
    [
        "WANDB_API_KEY",
        "HF_TOKEN",
        "DB_PASSWORD",
        "PGPASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "ssh_private",
    ],
)
def test_names_that_look_secret(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["WANDB_MODE", "HF_HOME", "SEED", "NCCL_DEBUG"])
def test_names_that_do_not(name):
    assert not looks_secret(name)


def test_shown_env_keeps_references_masks_secret_looking_values_and_sorts_by_name():
    env = {
        "WANDB_MODE": "offline",
        "WANDB_API_KEY": "abc123secret",
        "HF_TOKEN": {"secret": "hf", "key": "token"},
        "SEED": 7,
    }

    assert list(shown_env(env).items()) == [
        ("HF_TOKEN", {"secret": "hf", "key": "token"}),
        ("SEED", "7"),
        ("WANDB_API_KEY", MASK),
        ("WANDB_MODE", "offline"),
    ]


def test_masking_what_is_stored_keeps_references_and_is_idempotent():
    env = {"WANDB_API_KEY": "abc", "HF_TOKEN": {"secret": "hf", "key": "token"}, "A": "b"}

    once = mask_secret_values(env)

    assert once == {"WANDB_API_KEY": MASK, "HF_TOKEN": {"secret": "hf", "key": "token"}, "A": "b"}
    assert mask_secret_values(once) == once
    assert holds_secret_values(env) and not holds_secret_values(once)
