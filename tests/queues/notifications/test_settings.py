"""A person's notification settings, on the page and through the API: the same choices, each
person's own, every bad value refused naming its field with nothing stored."""

from __future__ import annotations

import pytest

from queues.models import NotificationPreference, NotificationWebhook
from queues.notifications.preferences import preferences_of

pytestmark = pytest.mark.django_db


def test_the_api_answers_every_event_and_channel_with_the_defaults(api_as, mia):
    answer = api_as(mia).get("/api/notifications/")
    assert answer.status_code == 200
    body = answer.json()
    chosen = {(p["event"], p["channel"]): p["enabled"] for p in body["preferences"]}
    assert chosen == {
        ("job_started", "email"): False,
        ("job_started", "webhook"): False,
        ("job_finished", "email"): False,
        ("job_finished", "webhook"): False,
        ("job_failed", "email"): True,
        ("job_failed", "webhook"): True,
        ("job_preempted", "email"): True,
        ("job_preempted", "webhook"): True,
        ("job_drain_ahead", "email"): True,
        ("job_drain_ahead", "webhook"): True,
        ("job_start_later", "email"): False,
        ("job_start_later", "webhook"): False,
        ("quota_request_decided", "email"): True,
        ("quota_request_decided", "webhook"): True,
        # For admins and finance only (nobody else is ever sent one).
        ("queue_past_target", "email"): True,
        ("queue_past_target", "webhook"): True,
        ("budget_exceeded", "email"): True,
        ("budget_exceeded", "webhook"): True,
    }
    assert body["webhook_url"] == ""
    assert len(body["webhook_secret"]) == 64


def test_the_api_changes_only_what_it_is_given(api_as, mia, sara):
    client = api_as(mia)
    answer = client.put(
        "/api/notifications/",
        {
            "preferences": [
                {"event": "job_started", "channel": "email", "enabled": True},
                {"event": "job_failed", "channel": "webhook", "enabled": False},
            ],
            "webhook_url": "https://hooks.example.org/T000/B000",
        },
        format="json",
    )
    assert answer.status_code == 200
    chosen = preferences_of(mia)
    assert chosen[("job_started", "email")] is True
    assert chosen[("job_failed", "webhook")] is False
    assert chosen[("job_failed", "email")] is True
    assert answer.json()["webhook_url"] == "https://hooks.example.org/T000/B000"
    assert preferences_of(sara)[("job_started", "email")] is False  # hers are her own


def test_the_api_refuses_bad_values_naming_the_field_and_stores_nothing(api_as, mia):
    client = api_as(mia)
    answer = client.put(
        "/api/notifications/",
        {
            "preferences": [{"event": "job_exploded", "channel": "pigeon", "enabled": "maybe"}],
            "webhook_url": "ftp://example.org/x",
        },
        format="json",
    )
    assert answer.status_code == 400
    assert answer.json() == {
        "preferences": {
            "0": {
                "event": ['"job_exploded" is not a valid choice.'],
                "channel": ['"pigeon" is not a valid choice.'],
                "enabled": ["Must be a valid boolean."],
            }
        },
        "webhook_url": ["an http:// or https:// address without spaces, at most 500 characters"],
    }
    assert not NotificationPreference.objects.exists()


def test_of_a_pair_named_twice_the_last_counts(api_as, mia):
    on = {"event": "job_started", "channel": "email", "enabled": True}
    answer = api_as(mia).put(
        "/api/notifications/", {"preferences": [on, {**on, "enabled": False}]}, format="json"
    )
    assert answer.status_code == 200
    assert preferences_of(mia)[("job_started", "email")] is False


def test_the_page_saves_the_boxes_ticked_and_the_webhook(client, mia):
    client.force_login(mia)
    page = client.get("/settings/notifications/")
    assert page.status_code == 200
    assert b'name="job_failed__email" id="id_job_failed__email" checked' in page.content
    assert b'name="job_started__email" id="id_job_started__email">' in page.content

    saved = client.post(
        "/settings/notifications/",
        {"job_started__email": "on", "webhook_url": "https://hooks.example.org/x"},
    )
    assert saved.status_code == 302
    chosen = preferences_of(mia)
    assert chosen[("job_started", "email")] is True
    assert chosen[("job_failed", "email")] is False  # unticked on the page
    assert NotificationWebhook.objects.get(user=mia).url == "https://hooks.example.org/x"

    refused = client.post("/settings/notifications/", {"webhook_url": "not a url at all"})
    assert refused.status_code == 200
    assert refused.context["form"].errors == {
        "webhook_url": ["an http:// or https:// address without spaces, at most 500 characters"]
    }
    assert NotificationWebhook.objects.get(user=mia).url == "https://hooks.example.org/x"


def test_a_new_secret_replaces_the_old(client, mia):
    client.force_login(mia)
    client.get("/settings/notifications/")
    old = NotificationWebhook.objects.get(user=mia).secret
    assert client.post("/settings/notifications/webhook-secret").status_code == 302
    assert NotificationWebhook.objects.get(user=mia).secret != old


def test_queue_events_are_offered_to_admins_and_finance_only(client, mia, ada, fiona):
    for user, offered in ((mia, False), (ada, True), (fiona, True)):
        client.force_login(user)
        page = client.get("/settings/notifications/")
        assert (b'name="queue_past_target__email"' in page.content) is offered, user
