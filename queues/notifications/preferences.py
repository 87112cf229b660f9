"""Who wants which notification on which channel: each person's choices, and the defaults."""

from __future__ import annotations

import re
import secrets

from django.contrib.auth.models import User
from django.db import transaction

from queues.models import (
    NotificationChannel,
    NotificationEvent,
    NotificationPreference,
    NotificationWebhook,
)

Choice = tuple[str, str]  # (event, channel)

# A webhook URL: http(s), no spaces, at most 500 characters. Whether the host answers is the
# send's business (a failed send is tried again, then shown on the settings page as failed).
# No spaces or control characters; written so that Python and JSON Schema read it the same.
WEBHOOK_URL_PATTERN = r"https?://[^\x00-\x20\x7f]+"
WEBHOOK_URL = re.compile(WEBHOOK_URL_PATTERN)
WEBHOOK_URL_MAX = 500
WEBHOOK_URL_PROBLEM = "an http:// or https:// address without spaces, at most 500 characters"


def webhook_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook URL ("" — none — is fine); None when it can."""
    if url and (len(url) > WEBHOOK_URL_MAX or not WEBHOOK_URL.fullmatch(url)):
        return WEBHOOK_URL_PROBLEM
    return None


# Without a choice of their own, a person hears of failures, preemptions, coming drains and
# quota decisions, not of every start and end. A webhook receives what e-mail would, once its
# URL is set.
ON_BY_DEFAULT = {
    NotificationEvent.JOB_FAILED,
    NotificationEvent.JOB_PREEMPTED,
    NotificationEvent.JOB_DRAIN_AHEAD,
    NotificationEvent.QUOTA_REQUEST_DECIDED,
    NotificationEvent.QUEUE_PAST_TARGET,
}
# Events about the cluster as a whole: for admins and finance only (the page shows them only
# to them, and nobody else is ever a recipient).
STAFF_EVENTS = {NotificationEvent.QUEUE_PAST_TARGET}
DEFAULTS: dict[Choice, bool] = {
    (event.value, channel.value): event in ON_BY_DEFAULT
    for event in NotificationEvent
    for channel in NotificationChannel
}


def preferences_of(user: User) -> dict[Choice, bool]:
    """Every (event, channel) → on or off for ``user``: their choices over the defaults."""
    chosen = {
        (p.event, p.channel): p.enabled for p in NotificationPreference.objects.filter(user=user)
    }
    return {**DEFAULTS, **chosen}


def webhook_of(user: User) -> NotificationWebhook:
    """The person's webhook row (made, with a new signing secret, on first use)."""
    hook, _ = NotificationWebhook.objects.get_or_create(
        user=user, defaults={"secret": secrets.token_hex(32)}
    )
    return hook


def preferences_set(*, user: User, choices: dict[Choice, bool], webhook_url: str | None) -> None:
    """Store ``user``'s choices (every pair given; others keep theirs) and, unless None, their
    webhook URL ("" removes it). The values are already checked (form or serializer)."""
    unknown = set(choices) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown event or channel: {sorted(unknown)}")
    with transaction.atomic():
        for (event, channel), enabled in choices.items():
            NotificationPreference.objects.update_or_create(
                user=user, event=event, channel=channel, defaults={"enabled": enabled}
            )
        if webhook_url is not None:
            hook = webhook_of(user)
            if hook.url != webhook_url:
                hook.url = webhook_url
                hook.save(update_fields=["url"])


def webhook_secret_rotate(*, user: User) -> str:
    """A new signing secret for ``user``'s webhook (the old one stops verifying at once)."""
    hook = webhook_of(user)
    hook.secret = secrets.token_hex(32)
    hook.save(update_fields=["secret"])
    return hook.secret


def recipients(asks: list[tuple[list[User], str]]) -> list[list[tuple[User, str]]]:
    """For each (people, event) of ``asks``: (person, channel) for each of them who wants the
    event on a channel they can be reached by (e-mail needs an address, a webhook a URL). Two
    queries, however many asks."""
    people = {u.pk: u for users, _ in asks for u in users}
    if not people:
        return [[] for _ in asks]
    chosen = {
        (p.user_id, p.event, p.channel): p.enabled
        for p in NotificationPreference.objects.filter(user_id__in=people)
    }
    hooks = set(
        NotificationWebhook.objects.filter(user_id__in=people)
        .exclude(url="")
        .values_list("user_id", flat=True)
    )
    answers = []
    for users, event in asks:
        found = []
        for user in users:
            for channel in NotificationChannel:
                default = DEFAULTS[(event, channel.value)]
                wanted = chosen.get((user.pk, event, channel.value), default)
                if channel == NotificationChannel.EMAIL:
                    reachable = bool(user.email)
                else:
                    reachable = user.pk in hooks
                if wanted and reachable:
                    found.append((user, channel.value))
        answers.append(found)
    return answers
