"""The Celery app. Tasks live in the apps that own them; settings come from Django's (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Tasks live beside what they run (queues/reconcile/tasks.py), not at an app's top level.
app.autodiscover_tasks(["queues.reconcile", "queues.jobs", "queues.notifications", "chargeback"])
