"""A value stored under a secret-looking name (the policy allowed it) leaves the portal only for the
pod that needs it: no answer, page, export, log line or audit entry shows it, while the job runs
or after, and once the job has ended the portal no longer keeps it."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from auditlog.models import LogEntry
from django.core.management import call_command
from django.test import Client

from queues.audit import AuditSource, audit_context
from queues.cluster.adapter import Cluster
from queues.models import Job, JobState
from queues.policy.apply import policy_apply
from queues.reconcile.cycle import reconcile_cycle

pytestmark = pytest.mark.django_db

VALUE = "hf-path-s3cret"


@pytest.fixture
def cycle(sim_cluster, example_policy, settings):
    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)  # the pages read pods' logs
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))

    def run():
        return reconcile_cycle(cluster=adapter, now=sim_cluster.now())

    yield run
    adapter.close()


def everything_shown(job: Job, *, member: Client, admin: Client, api) -> dict[str, str]:
    """Every place a job's data can be read, by name (each must answer 200)."""
    answers = {
        "API job": api.get(f"/api/jobs/{job.pk}/"),
        "API list": api.get("/api/jobs/"),
        "API timeline": api.get(f"/api/jobs/{job.pk}/events/"),
        "API logs": api.get(f"/api/jobs/{job.pk}/logs/"),
        "job page": member.get(f"/jobs/{job.pk}/"),
        "job page's logs": member.get(f"/jobs/{job.pk}/logs"),
        "my jobs": member.get("/jobs/"),
        "resubmit": member.get(f"/jobs/new?from={job.pk}"),
        "usage": member.get("/usage/"),
        "admin job": admin.get(f"/admin/queues/job/{job.pk}/change/"),
        "admin jobs": admin.get("/admin/queues/job/"),
        "chargeback page": admin.get("/chargeback/"),
        "chargeback CSV": admin.get("/chargeback/", {"format": "csv"}),
        "chargeback job": admin.get(f"/chargeback/jobs/{job.pk}/"),
        "chargeback API": api.get("/api/chargeback/"),
        "audit page": admin.get("/manage/audit/"),
    }
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 200)
    export = StringIO()
    call_command("export_policy", stdout=export)
    return {
        **{name: r.content.decode() for name, r in answers.items()},
        "audit entries": " ".join(
            f"{e.changes} {e.additional_data} {e.object_repr}" for e in LogEntry.objects.all()
        ),
        "policy export": export.getvalue(),
    }


def test_an_allowed_secret_looking_value_is_never_shown_and_not_kept_after_the_job(
    sim_cluster, cycle, mia, api_as, django_user_model, caplog
):
    caplog.set_level(logging.DEBUG)
    with audit_context(actor=None, source=AuditSource.FILE):
        policy_apply(text="submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH]\n")
    api = api_as(mia)
    member = Client()
    member.force_login(mia)
    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("root", password="pw-for-tests"))
    submitted = api.post(
        "/api/jobs/",
        {
            "team": "vision",
            "queue": "batch",
            "capability_class": "any-gpu",
            "image": "registry.example/train:1",
            "command": ["python", "train.py"],
            "env": {"HF_TOKEN_PATH": VALUE, "SIM_DURATION_SECONDS": "120"},
        },
        format="json",
    )
    assert submitted.status_code == 201 and VALUE not in submitted.content.decode()
    job = Job.objects.get()
    cycle()
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    while_running = everything_shown(job, member=member, admin=admin, api=api)

    sim_cluster.advance(150)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    after = everything_shown(job, member=member, admin=admin, api=api)

    for name, text in {**while_running, **after}.items():
        assert VALUE not in text, name
    assert "HF_TOKEN_PATH=••••••" in after["job page"]
    assert VALUE not in caplog.text
    assert VALUE not in str(Job.objects.values_list("env", flat=True).get())
