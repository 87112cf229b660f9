"""Sending: each due delivery goes out once, by e-mail or webhook, several at once as one digest.

A recipient is a person on a channel, or a team's webhook (the team's channel). A sender claims a
recipient's due deliveries with one conditional UPDATE (its own
token in ``claimed_by``), so two workers, or a task and its retry, never hold the same row; it
sends them as one message (one delivery: that event; several: a digest listing them, so fifty
jobs failing in a minute is one message), then marks exactly the rows it claimed. A worker that
dies after claiming leaves rows ``sending``; after ``CLAIM_LEASE`` another may claim them again.
Were the receiver to have accepted the message just before the worker died, that second send
repeats it, with the same ``Message-ID`` / ``X-GPUPortal-Delivery`` (a delivery's id never
changes), by which the receiver can recognize it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMessage
from django.db.models import F, Q, QuerySet

from queues.models import (
    DeliveryStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationWebhook,
    TeamWebhook,
)

logger = logging.getLogger(__name__)

CLAIM_LEASE = timedelta(seconds=settings.NOTIFICATION_CLAIM_SECONDS)
MAX_ATTEMPTS = 8
DIGEST_LINES = 100  # a digest lists this many events, then says how many more
WEBHOOK_TIMEOUT = 10.0
SIGNATURE_HEADER = "X-GPUPortal-Signature"


class DeliveryFailed(Exception):
    """The message did not go out; the rows are due again (the task retries with back-off)."""


@dataclass(frozen=True)
class Message:
    id: str
    subject: str
    text: str
    events: list[dict]


def due(*, now: datetime) -> QuerySet[NotificationDelivery]:
    """Deliveries waiting to go out (a failed one once its back-off has passed), and those whose
    sender died (a claim older than the lease)."""
    return NotificationDelivery.objects.filter(
        Q(status=DeliveryStatus.PENDING, next_attempt_at__isnull=True)
        | Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        | Q(status=DeliveryStatus.SENDING, claimed_at__lt=now - CLAIM_LEASE)
    )


def backoff(attempts: int) -> timedelta:
    """How long a delivery that failed ``attempts`` times waits: 10 s, 20 s, 40 s … 30 min."""
    return timedelta(seconds=min(10 * 2 ** max(attempts - 1, 0), 1800))


def due_recipients(*, now: datetime) -> set[tuple[int, str]]:
    """(user id, channel) of everybody with a delivery due."""
    return set(due(now=now).filter(user__isnull=False).values_list("user_id", "channel"))


def due_teams(*, now: datetime) -> set[int]:
    """Ids of the teams whose webhook has a delivery due."""
    return set(due(now=now).filter(team__isnull=False).values_list("team_id", flat=True))


def deliveries_claim(
    *, user_id: int | None = None, team_id: int | None = None, channel: str, now: datetime
) -> tuple[str, list]:
    """Claim the due deliveries of ``user_id`` (or of ``team_id``'s webhook) on ``channel``: a
    token and the rows it holds."""
    token = uuid.uuid4().hex
    mine = Q(user_id=user_id) if team_id is None else Q(team_id=team_id)
    ids = list(due(now=now).filter(mine, channel=channel).values_list("pk", flat=True))
    if not ids:
        return token, []
    due(now=now).filter(pk__in=ids).update(
        status=DeliveryStatus.SENDING, claimed_by=token, claimed_at=now, attempts=F("attempts") + 1
    )
    rows = list(NotificationDelivery.objects.filter(claimed_by=token).order_by("created_at", "pk"))
    return token, rows


def message_of(rows: list[NotificationDelivery]) -> Message:
    """One delivery: its own words; several: a digest, one line each."""
    ids = sorted(r.pk for r in rows)
    message_id = f"gpuportal-{ids[0]}" + (f"-{ids[-1]}-{len(ids)}" if len(ids) > 1 else "")
    events = [
        {"id": r.pk, "key": r.key, "event": r.event, "subject": r.subject, "text": r.text,
         "details": r.details}
        for r in rows
    ]  # fmt: skip
    if len(rows) == 1:
        return Message(message_id, rows[0].subject, rows[0].text, events)
    counts: dict[str, int] = {}
    for row in rows:
        label = row.get_event_display()
        counts[label] = counts.get(label, 0) + 1
    summary = ", ".join(f"{label.lower()}: {n}" for label, n in counts.items())
    lines = [f"- {r.text}" for r in rows[:DIGEST_LINES]]
    if len(rows) > DIGEST_LINES:
        lines.append(f"… and {len(rows) - DIGEST_LINES} more")
    subject = f"GPU Portal: {len(rows)} notifications ({summary})"
    return Message(message_id, subject, "\n".join([f"{subject}", "", *lines]), events)


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, "<timestamp>." + body), as receivers recompute
    it."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def send_email(user: User, message: Message) -> None:
    email = EmailMessage(
        subject=message.subject,
        body=message.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[user.email],
        headers={
            "Message-ID": f"<{message.id}@{settings.NOTIFICATION_MESSAGE_DOMAIN}>",
            "X-GPUPortal-Delivery": message.id,
        },
    )
    email.send(fail_silently=False)


def send_webhook(user: User, message: Message) -> None:
    hook = NotificationWebhook.objects.filter(user=user).exclude(url="").first()
    if hook is None:
        raise DeliveryFailed("no webhook URL any more")
    post_webhook(hook.url, hook.secret, message)


def send_team_webhook(team_id: int, message: Message) -> None:
    hook = TeamWebhook.objects.filter(team_id=team_id).exclude(url="").first()
    if hook is None:
        raise DeliveryFailed("the team has no webhook URL any more")
    post_webhook(hook.url, hook.secret, message)


def post_webhook(url: str, secret: str, message: Message) -> None:
    """POST ``message`` as JSON to ``url``, signed with ``secret``; 2xx or ``DeliveryFailed``."""
    event = message.events[0]["event"] if len(message.events) == 1 else "digest"
    body = json.dumps(
        {"text": message.text, "subject": message.subject, "event": event,
         "delivery": message.id, "events": message.events},
        ensure_ascii=False,
    ).encode()  # fmt: skip
    timestamp = str(int(time.time()))
    response = requests.post(
        url,
        data=body,
        timeout=WEBHOOK_TIMEOUT,
        allow_redirects=False,
        headers={
            "Content-Type": "application/json",
            "User-Agent": "GPU-Portal-Notifications",
            "X-GPUPortal-Event": event,
            "X-GPUPortal-Delivery": message.id,
            "X-GPUPortal-Timestamp": timestamp,
            SIGNATURE_HEADER: webhook_signature(secret, timestamp, body),
        },
    )
    if not 200 <= response.status_code < 300:
        raise DeliveryFailed(f"the webhook answered {response.status_code}")


def deliveries_send(*, user_id: int, channel: str, now: datetime) -> int:
    """Send ``user_id``'s due deliveries on ``channel`` as one message; returns how many went
    out. Raises ``DeliveryFailed`` when the message did not (the rows are due again, or failed
    for good after ``MAX_ATTEMPTS``)."""
    token, rows = deliveries_claim(user_id=user_id, channel=channel, now=now)
    if not rows:
        return 0
    user = User.objects.get(pk=user_id)

    def send(message: Message) -> None:
        if channel == NotificationChannel.EMAIL:
            if not user.email:
                raise DeliveryFailed("no e-mail address")
            send_email(user, message)
        else:
            send_webhook(user, message)

    return _send(token, rows, send, to=f"user {user_id} by {channel}", now=now)


def deliveries_send_team(*, team_id: int, now: datetime) -> int:
    """Send the due deliveries of ``team_id``'s webhook as one message (as ``deliveries_send``)."""
    token, rows = deliveries_claim(team_id=team_id, channel=NotificationChannel.WEBHOOK, now=now)
    if not rows:
        return 0
    return _send(
        token,
        rows,
        lambda message: send_team_webhook(team_id, message),
        to=f"team {team_id} by webhook",
        now=now,
    )


def _send(
    token: str,
    rows: list[NotificationDelivery],
    send: Callable[[Message], None],
    *,
    to: str,
    now: datetime,
) -> int:
    """Send the claimed ``rows`` as one message with ``send``; mark exactly them sent, or due
    again after their back-off (failed for good after ``MAX_ATTEMPTS``)."""
    message = message_of(rows)
    try:
        send(message)
    except (OSError, requests.RequestException, DeliveryFailed) as exc:
        error = str(exc)[:500] or exc.__class__.__name__
        mine = NotificationDelivery.objects.filter(claimed_by=token, status=DeliveryStatus.SENDING)
        mine.filter(attempts__gte=MAX_ATTEMPTS).update(
            status=DeliveryStatus.FAILED, last_error=error
        )
        mine.update(
            status=DeliveryStatus.PENDING,
            last_error=error,
            next_attempt_at=now + backoff(max(r.attempts for r in rows)),
        )
        logger.warning("notification %s to %s failed: %s", message.id, to, error)
        raise DeliveryFailed(error) from exc
    sent = NotificationDelivery.objects.filter(
        claimed_by=token, status=DeliveryStatus.SENDING
    ).update(status=DeliveryStatus.SENT, sent_at=now, message_id=message.id)
    logger.info("notification %s to %s: %s event(s)", message.id, to, sent)
    return sent
