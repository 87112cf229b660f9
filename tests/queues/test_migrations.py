"""Data migrations, run with Django's own executor on the real test database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from portal.masking import MASK
from queues.models import Job

BEFORE = ("queues", "0021_job_env_from_secrets_submission_settings")
MASKING = ("queues", "0022_mask_stored_secret_values")


def migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


@pytest.fixture(autouse=True)
def migrated_back_to_the_latest():
    """Leave the schema as every other test expects it: every app at its latest migration
    (a test that stops at an old one would hide later tables from the tests after it)."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def job(owner, state: str, env: dict):
    """A job row as the schema at ``BEFORE`` has it (the historical model: the current one has
    columns added since)."""
    apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    names = {
        "team": ("Team", "nlp"),
        "queue": ("Queue", "batch"),
        "capability_class": ("CapabilityClass", "any-gpu"),
    }
    related = {
        f"{field}_id": apps.get_model("queues", model).objects.get(name=name).pk
        for field, (model, name) in names.items()
    }
    return apps.get_model("queues", "Job").objects.create(
        owner_id=owner.pk,
        image="registry.example/train:1",
        command=["python", "train.py"],
        runtime_limit=timedelta(hours=1),
        submitted_at=timezone.now(),
        state=state,
        env=env,
        **related,
    )


@pytest.mark.django_db(transaction=True)
def test_stored_secret_values_are_masked_once_and_an_active_jobs_when_it_ends(mia):
    migrate(BEFORE)  # its reverse does nothing: nothing masked can be recovered
    stored = {
        "WANDB_API_KEY": "abc123secret",
        "WANDB_MODE": "offline",
        "HF_TOKEN": {"secret": "hf", "key": "token"},
    }
    ended = job(mia, "succeeded", stored)
    cancelled = job(mia, "cancelled", {"DB_PASSWORD": MASK})  # masked already
    waiting = job(mia, "pending", {"DB_PASSWORD": "hunter2"})
    plain = job(mia, "failed", {"SEED": "7"})

    migrate(MASKING)

    for row in (ended, cancelled, waiting, plain):
        row.refresh_from_db()
    assert ended.env == {
        "WANDB_API_KEY": MASK,
        "WANDB_MODE": "offline",
        "HF_TOKEN": {"secret": "hf", "key": "token"},
    }
    assert (cancelled.env, cancelled.holds_secret_values) == ({"DB_PASSWORD": MASK}, False)
    # a job that may still start pods keeps its value until it ends (the reconcile masks it)
    assert (waiting.env, waiting.holds_secret_values) == ({"DB_PASSWORD": "hunter2"}, True)
    assert (plain.env, plain.holds_secret_values) == ({"SEED": "7"}, False)

    migrate(BEFORE)
    migrate(MASKING)  # again: nothing changes

    ended.refresh_from_db()
    assert ended.env["WANDB_API_KEY"] == MASK
    assert Job.objects.filter(holds_secret_values=True).count() == 1
