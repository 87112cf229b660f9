"""Mask the plain values of secret-looking environment variables already stored.

Before this release a job could carry ``WANDB_API_KEY=abc123`` as plain text. From now on the
portal keeps such a value only while the job may still start pods: an ended job's values are
replaced by the mask here, and an active one (pending, admitted, running, preempted) is marked
``holds_secret_values`` so that the reconcile masks them once it ends (masking them now would
start its pods with the mask for a value).

Nothing else holds such values: job events and the reconcile's log lines and history never
quote a job's environment, and jobs are not in the audit log. Idempotent (a masked value stays
masked); reversing it does nothing (a masked value cannot be recovered).
"""

from django.db import migrations

from portal.masking import holds_secret_values, mask_secret_values

# queues.models.ACTIVE_JOB_STATES as of this migration.
ACTIVE_STATES = ("pending", "admitted", "running", "preempted")
BATCH = 1000


def mask_stored_values(apps, schema_editor):
    Job = apps.get_model("queues", "Job")
    rows = Job.objects.only("id", "state", "env", "holds_secret_values").order_by("id")
    last = 0
    # A page at a time, read whole before it is written (no write under an open cursor).
    while page := list(rows.filter(id__gt=last)[:BATCH]):
        last = page[-1].id
        masked, marked = [], []
        for job in page:
            if not holds_secret_values(job.env or {}):
                continue
            if job.state in ACTIVE_STATES:
                if not job.holds_secret_values:
                    job.holds_secret_values = True
                    marked.append(job)
            else:
                job.env = mask_secret_values(job.env)
                job.holds_secret_values = False
                masked.append(job)
        Job.objects.bulk_update(masked, ["env", "holds_secret_values"])
        Job.objects.bulk_update(marked, ["holds_secret_values"])


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0021_job_env_from_secrets_submission_settings"),
    ]

    operations = [
        migrations.RunPython(mask_stored_values, migrations.RunPython.noop),
    ]
