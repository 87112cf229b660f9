"""Who wants which notification on which channel: each person's choices, each team webhook's
events, and the defaults."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from queues.audit import audit_action, audit_changed
from queues.models import (
    NotificationChannel,
    NotificationEvent,
    NotificationPreference,
    NotificationWebhook,
    Team,
    TeamWebhook,
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
    NotificationEvent.BUDGET_EXCEEDED,
}
# Events about the cluster as a whole: for admins and finance only (the page shows them only
# to them, and nobody else is ever a recipient).
STAFF_EVENTS = {NotificationEvent.QUEUE_PAST_TARGET, NotificationEvent.BUDGET_EXCEEDED}
# What a team's webhook may receive: its jobs' events (whoever owns the job); without a choice,
# failures and preemptions, as a person's defaults.
TEAM_EVENTS = (
    NotificationEvent.JOB_STARTED,
    NotificationEvent.JOB_FINISHED,
    NotificationEvent.JOB_FAILED,
    NotificationEvent.JOB_PREEMPTED,
    NotificationEvent.JOB_DRAIN_AHEAD,
    NotificationEvent.JOB_START_LATER,
)
TEAM_DEFAULTS = [NotificationEvent.JOB_FAILED.value, NotificationEvent.JOB_PREEMPTED.value]
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


def team_webhook_of(team: Team) -> TeamWebhook:
    """The team's webhook row (made, with a new signing secret and the default events, on first
    use; without a URL it receives nothing)."""
    hook, _ = TeamWebhook.objects.get_or_create(
        team=team, defaults={"secret": secrets.token_hex(32), "events": list(TEAM_DEFAULTS)}
    )
    return hook


def team_webhook_set(
    *, team: Team, url: str | None, events: list[str] | None, now: datetime
) -> TeamWebhook:
    """Store ``team``'s webhook URL ("" removes it) and the events it receives, each unless
    None; after a change at ``now`` nothing that happened before it is sent. The values are
    already checked (form or serializer): ``url`` by ``webhook_url_problem``, ``events`` within
    ``TEAM_EVENTS``. A change is audited (old → new URL and events), as the caller's request
    (``queues.audit``) says who made it and from where."""
    if events is not None and set(events) - {e.value for e in TEAM_EVENTS}:
        raise ValueError(f"not a team event: {sorted(set(events) - set(TEAM_EVENTS))}")
    with transaction.atomic():
        hook = team_webhook_of(team)
        fields = []
        before = {"url": hook.url, "events": list(hook.events)}
        if url is not None and url != hook.url:
            hook.url = url
            fields.append("url")
        if events is not None:
            ordered = [e.value for e in TEAM_EVENTS if e.value in events]
            if ordered != hook.events:
                hook.events = ordered
                fields.append("events")
        if fields:
            # What happened before the change is not news to the new URL or events (the
            # collector re-reads some of the timeline it had read).
            hook.since = now
            hook.save(update_fields=[*fields, "since"])
            audit_changed(hook, {name: (before[name], getattr(hook, name)) for name in fields})
    return hook


def team_webhook_secret_rotate(*, team: Team) -> None:
    """A new signing secret for ``team``'s webhook (the old one stops verifying at once); audited
    as rotated, never with either secret."""
    with transaction.atomic():
        hook = team_webhook_of(team)
        hook.secret = secrets.token_hex(32)
        hook.save(update_fields=["secret"])
        audit_action(hook, what="secret rotated", changes={"secret": ("", "rotated")})


def secret_fingerprint(secret: str) -> str:
    """What the API says of a team webhook's secret instead of the secret: the first 12 hex
    digits of its SHA-256, enough to tell which secret a receiver holds."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def team_hooks_wanting(team_ids: set[int]) -> dict[int, tuple[set[str], datetime | None]]:
    """For each of ``team_ids`` with a webhook URL: the events it receives, and since when
    (events that happened before its URL or events last changed are not sent). One query."""
    return {
        team_id: (set(events), since)
        for team_id, events, since in TeamWebhook.objects.filter(team_id__in=team_ids)
        .exclude(url="")
        .values_list("team_id", "events", "since")
    }


def events_wanted() -> set[str]:
    """The events someone may receive now: on by default (a person who never chose hears them),
    turned on by someone, or received by a team's webhook that has a URL. What nobody may
    receive is not worth finding (the collector reads the timeline every few seconds). Two
    queries."""
    wanted = {event.value for event in ON_BY_DEFAULT}
    wanted.update(
        NotificationPreference.objects.filter(enabled=True)
        .values_list("event", flat=True)
        .distinct()
    )
    for events in TeamWebhook.objects.exclude(url="").values_list("events", flat=True):
        wanted.update(events)
    return wanted


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
