"""Celery tasks of notifications: collect what happened, send what is due. Thin: each calls one
service; running either twice has the effect of running it once (the deliveries' unique key, the
senders' claims)."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from queues.notifications.delivery import (
    MAX_ATTEMPTS,
    DeliveryFailed,
    deliveries_send,
    deliveries_send_team,
    due_recipients,
    due_teams,
)
from queues.notifications.events import notifications_collect


@shared_task(name="queues.notifications.collect", acks_late=True, ignore_result=True)
def collect() -> int:
    """Collect new events into deliveries, then ask for a send per person and channel with
    deliveries due, ``NOTIFICATION_BATCH_SECONDS`` later (a burst meanwhile joins the same
    message). Beat runs it every ``NOTIFICATION_INTERVAL_SECONDS``; a reconcile that changed
    something asks for one as it ends."""
    made = notifications_collect(now=timezone.now())
    pairs = due_recipients(now=timezone.now())
    for user_id, channel in sorted(pairs):
        transaction.on_commit(partial(_send_later, user_id, channel))
    for team_id in sorted(due_teams(now=timezone.now())):
        transaction.on_commit(partial(_send_team_later, team_id))
    return made


# A send is acknowledged only when done (a worker that dies mid-send leaves it queued; the
# delivery table keeps a message from going twice) and retried with backoff while it fails.
RETRIED_SEND: dict[str, Any] = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": (DeliveryFailed,),
    "retry_backoff": 10,
    "retry_backoff_max": 1800,
    "retry_jitter": True,
    "max_retries": MAX_ATTEMPTS,
}


def _send_later(user_id: int, channel: str) -> None:
    send.apply_async((user_id, channel), countdown=settings.NOTIFICATION_BATCH_SECONDS)


def _send_team_later(team_id: int) -> None:
    send_team.apply_async((team_id,), countdown=settings.NOTIFICATION_BATCH_SECONDS)


@shared_task(bind=True, name="queues.notifications.send", **RETRIED_SEND)
def send(self: Task, user_id: int, channel: str) -> int:
    """Send ``user_id``'s due deliveries on ``channel`` as one message."""
    return deliveries_send(user_id=user_id, channel=channel, now=timezone.now())


@shared_task(bind=True, name="queues.notifications.send_team", **RETRIED_SEND)
def send_team(self: Task, team_id: int) -> int:
    """Send the due deliveries of ``team_id``'s webhook as one message."""
    return deliveries_send_team(team_id=team_id, now=timezone.now())
