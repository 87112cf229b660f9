"""A real Celery worker (with beat, as deployed) sends a notification to a real SMTP server and is
SIGKILLed in the middle of sending it; a second worker started afterwards sends it, and the
person gets exactly one message. Redis db 11 is the broker (emptied first)."""

from __future__ import annotations

import time

import pytest
import redis
from django.utils import timezone

from queues.models import (
    CapabilityClass,
    DeliveryStatus,
    EventKind,
    JobState,
    NotificationDelivery,
    Queue,
    Team,
)
from queues.notifications.events import notifications_collect
from queues.reconcile.jobs import job_transition
from tests.factories import JobFactory
from tests.faults.processes import this_database_url, wait_until, worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BROKER = "redis://127.0.0.1:6379/11"


@pytest.fixture
def broker():
    client = redis.Redis.from_url(BROKER)
    client.flushdb()
    yield BROKER
    client.flushdb()
    client.close()


def test_a_worker_killed_mid_send_and_a_new_one_send_the_message_once(
    tmp_path, sim_cluster, smtp_server, broker, mia
):
    mia.email = "mia@example.org"
    mia.save(update_fields=["email"])
    notifications_collect(now=timezone.now())  # notifications begin here
    job = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        state=JobState.RUNNING,
    )
    now = timezone.now()
    job_transition(
        job,
        to=JobState.FAILED,
        kind=EventKind.FAILED,
        message="ran past its runtime limit of 1h",
        now=now,
        failure_reason="TimedOut",
        finished_at=now,
    )
    env = {
        "DATABASE_URL": this_database_url(),
        "CELERY_BROKER_URL": broker,
        "CLUSTER_MODE": "kubeconfig",
        "KUBECONFIG": str(sim_cluster.kubeconfig),
        "EMAIL_HOST": smtp_server.host,
        "EMAIL_PORT": str(smtp_server.port),
        "NOTIFY_ON_COMMIT": "true",
        "NOTIFICATION_INTERVAL_SECONDS": "0.5",
        "NOTIFICATION_BATCH_SECONDS": "0",
        "NOTIFICATION_CLAIM_SECONDS": "3",
    }
    smtp_server.inbox.hold.set()  # the server keeps the message's DATA waiting
    first = worker(tmp_path, "first", **env).start()
    try:
        wait_until(smtp_server.inbox.holding.is_set, what="the first worker is sending")
        row = NotificationDelivery.objects.get()
        assert (row.status, row.attempts) == (DeliveryStatus.SENDING, 1)
        first.kill()
    finally:
        first.stop()
    smtp_server.inbox.hold.clear()  # the dead sender's message is dropped, unfinished

    second = worker(tmp_path, "second", **env).start()
    try:
        wait_until(
            lambda: NotificationDelivery.objects.filter(status=DeliveryStatus.SENT).exists(),
            what="the second worker sent it",
        )
        time.sleep(3)  # beat collects every half second: any second send would show by now
    finally:
        second.stop()

    assert [m["Subject"] for m in smtp_server.messages] == [f"Job {job.pk} failed"]
    row = NotificationDelivery.objects.get()
    assert (row.status, row.attempts) == (DeliveryStatus.SENT, 2)
