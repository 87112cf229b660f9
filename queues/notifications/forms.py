"""The settings page's form: a box per event and channel, and the webhook's URL."""

from __future__ import annotations

from typing import Any

from django import forms

from queues.models import NotificationChannel, NotificationEvent
from queues.notifications.preferences import (
    STAFF_EVENTS,
    TEAM_EVENTS,
    Choice,
    webhook_url_problem,
)

WEBHOOK_HELP = (
    "Slack or Microsoft Teams incoming webhook, or your own receiver: a JSON POST with a "
    "'text' field, signed in the X-GPUPortal-Signature header."
)


def field_name(event: str, channel: str) -> str:
    return f"{event}__{channel}"


class NotificationSettingsForm(forms.Form):
    webhook_url = forms.CharField(
        required=False,
        strip=True,
        label="Webhook URL",
        help_text=WEBHOOK_HELP,
        widget=forms.URLInput,
    )

    def __init__(
        self, *args: Any, preferences: dict[Choice, bool], staff: bool, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.events = [e for e in NotificationEvent if staff or e not in STAFF_EVENTS]
        for event in self.events:
            for channel in NotificationChannel:
                self.fields[field_name(event.value, channel.value)] = forms.BooleanField(
                    required=False,
                    initial=preferences[(event.value, channel.value)],
                    label=f"{event.label} by {channel.label.lower()}",
                )

    def clean_webhook_url(self) -> str:
        url: str = self.cleaned_data["webhook_url"]
        problem = webhook_url_problem(url)
        if problem:
            raise forms.ValidationError(problem)
        return url

    def choices(self) -> dict[Choice, bool]:
        return {
            (event.value, channel.value): bool(
                self.cleaned_data[field_name(event.value, channel.value)]
            )
            for event in self.events
            for channel in NotificationChannel
        }

    def rows(self) -> list[dict[str, Any]]:
        """One row per event with its bound field per channel, for the template's grid."""
        return [
            {
                "event": event,
                "fields": [self[field_name(event.value, c.value)] for c in NotificationChannel],
            }
            for event in self.events
        ]


TEAM_WEBHOOK_HELP = (
    "The team's channel (Slack or Microsoft Teams incoming webhook, or a receiver of its own): "
    "the team's jobs' events, whoever owns them, signed with the team's secret. Empty: none."
)


TEAM_EVENT_LABELS = {
    NotificationEvent.JOB_STARTED: "A job of the team started",
    NotificationEvent.JOB_FINISHED: "A job of the team finished",
    NotificationEvent.JOB_FAILED: "A job of the team failed",
    NotificationEvent.JOB_PREEMPTED: "A job of the team was preempted or stopped by a drain",
    NotificationEvent.JOB_DRAIN_AHEAD: "A job of the team will be stopped by a drain",
    NotificationEvent.JOB_START_LATER: "A waiting job of the team's latest start moved later",
}


class TeamWebhookForm(forms.Form):
    """A team's webhook: its URL and which of its jobs' events it receives."""

    url = forms.CharField(
        required=False, strip=True, label="Webhook URL", help_text=TEAM_WEBHOOK_HELP,
        widget=forms.URLInput,
    )  # fmt: skip
    events = forms.MultipleChoiceField(
        required=False,
        label="Events",
        choices=[(e.value, TEAM_EVENT_LABELS[e]) for e in TEAM_EVENTS],
        widget=forms.CheckboxSelectMultiple,
    )

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        problem = webhook_url_problem(url)
        if problem:
            raise forms.ValidationError(problem)
        return url
