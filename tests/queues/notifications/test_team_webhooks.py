"""A team's webhook: the team's channel hears of its jobs' events (failed and preempted unless an
admin chooses others), whoever owns the job, signed with the team's own secret, once per event,
a burst as one message; no other team's webhook and no person outside the team ever hears of
them. Admins set it on the admin side or through the API; the secret never leaves the page."""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest
from auditlog.models import LogEntry
from django.test import Client
from django.utils import timezone

from queues.models import (
    CapabilityClass,
    DeliveryStatus,
    EventKind,
    JobState,
    NotificationDelivery,
    Queue,
    Team,
    TeamWebhook,
)
from queues.notifications.delivery import deliveries_send_team, due_teams
from queues.notifications.events import notifications_collect
from queues.notifications.preferences import (
    DEFAULTS,
    TEAM_EVENTS,
    preferences_set,
    secret_fingerprint,
    team_webhook_of,
    team_webhook_set,
)
from queues.reconcile.jobs import job_transition
from tests.factories import JobFactory
from tests.queues.notifications.test_notifications import notify, run_until, submit

pytestmark = pytest.mark.django_db

EVERYTHING = {choice: True for choice in DEFAULTS}


def send_teams() -> int:
    """What the worker's team task does for each team with deliveries due."""
    return sum(
        deliveries_send_team(team_id=team_id, now=timezone.now())
        for team_id in sorted(due_teams(now=timezone.now()))
    )


def signed_by(post, secret: str) -> bool:
    timestamp = post.headers["X-GPUPortal-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + post.body, hashlib.sha256)
    return post.headers["X-GPUPortal-Signature"] == "sha256=" + expected.hexdigest()


@pytest.fixture
def hooks(people, receiver, sim_cluster):
    """vision's and search's webhooks on the receiver (paths /hook/vision, /hook/search), set
    as the simulated cluster's clock starts; every person outside vision wants everything on
    their own webhook (/hook/<name>)."""
    vision = team_webhook_set(
        team=Team.objects.get(name="vision"),
        url=f"{receiver.url}/vision",
        events=None,
        now=sim_cluster.now(),
    )
    search = team_webhook_set(
        team=Team.objects.get(name="search"),
        url=f"{receiver.url}/search",
        events=[e.value for e in TEAM_EVENTS],  # everything: still nothing of vision's jobs
        now=sim_cluster.now(),
    )
    for name in ("sara", "outsider"):
        preferences_set(user=people[name], choices=EVERYTHING, webhook_url=f"{receiver.url}/{name}")
    return {"vision": vision, "search": search}


def test_a_teams_webhook_hears_of_its_jobs_failure_signed_with_the_teams_secret(
    people, hooks, cycle, sim_cluster, receiver, smtp_server
):
    mia = people["mia"]
    job = run_until(
        submit(mia, seconds=30, exit_code=3, name="resnet"), JobState.FAILED, cycle, sim_cluster
    )

    assert notify() == 1  # mia's own e-mail
    assert send_teams() == 1  # vision's channel

    failed = job.events.get(kind=EventKind.FAILED)
    [post] = receiver.requests
    assert post.path == "/hook/vision"
    body = post.json()
    assert (body["event"], body["subject"]) == ("job_failed", f"Job {job.pk} (resnet) failed")
    assert body["text"] == (
        f"Job {job.pk} (resnet) of mia in queue batch, team vision failed: {failed.message}."
    )
    assert body["events"][0]["details"]["owner"] == "mia"
    assert signed_by(post, TeamWebhook.objects.get(team__name="vision").secret)
    assert not signed_by(post, TeamWebhook.objects.get(team__name="search").secret)
    # mia's own message is in her words, without her name
    [mail] = smtp_server.messages
    assert mail["To"] == "mia@example.org"
    assert mail["Subject"] == f"Job {job.pk} (resnet) failed"
    # Nobody outside vision heard of it: not search's channel, not sara, not the outsider.
    assert {r.path for r in receiver.requests} == {"/hook/vision"}
    reached = NotificationDelivery.objects.values_list("user__username", "team__name", "channel")
    assert sorted(reached, key=str) == sorted(
        [("mia", None, "email"), (None, "vision", "webhook")], key=str
    )


def test_each_event_reaches_the_team_once_however_often_collected_and_sent(
    people, hooks, cycle, sim_cluster, receiver
):
    job = run_until(
        submit(people["mia"], seconds=30, exit_code=1), JobState.FAILED, cycle, sim_cluster
    )
    for _ in range(3):
        notifications_collect(now=timezone.now())
    assert NotificationDelivery.objects.filter(team__isnull=False).count() == 1
    vision = Team.objects.get(name="vision").pk

    # Two senders at once: the first claims the row, the second finds nothing.
    assert deliveries_send_team(team_id=vision, now=timezone.now()) == 1
    assert deliveries_send_team(team_id=vision, now=timezone.now()) == 0
    notify()
    assert send_teams() == 0
    assert [r.path for r in receiver.requests] == ["/hook/vision"]
    row = NotificationDelivery.objects.get(team__isnull=False)
    assert (row.status, row.key) == (
        DeliveryStatus.SENT,
        f"job:{job.pk}:failed:{row.key.split(':')[-1]}",
    )


def test_a_team_hears_failed_and_preempted_by_default_not_starts(
    people, hooks, cycle, sim_cluster, receiver
):
    assert team_webhook_of(Team.objects.get(name="nlp")).events == ["job_failed", "job_preempted"]
    run_until(submit(people["mia"], seconds=600), JobState.RUNNING, cycle, sim_cluster)
    notify()

    assert send_teams() == 0
    assert receiver.requests == []


def test_a_team_hears_the_events_an_admin_chose(people, hooks, cycle, sim_cluster, receiver):
    team_webhook_set(
        team=Team.objects.get(name="vision"),
        url=None,
        events=["job_started"],
        now=sim_cluster.now(),
    )
    job = run_until(
        submit(people["victor"], seconds=30, exit_code=1), JobState.RUNNING, cycle, sim_cluster
    )
    notify()
    run_until(job, JobState.FAILED, cycle, sim_cluster)
    notify()

    assert send_teams() == 1  # its start; not its failure, which the admin left out
    [post] = receiver.requests
    assert post.json()["subject"] == f"Job {job.pk} started"
    assert post.json()["text"].startswith(f"Job {job.pk} of victor started in queue batch")


def test_fifty_failures_of_a_team_are_one_message_to_its_channel(people, hooks, receiver):
    team, queue = Team.objects.get(name="vision"), Queue.objects.get(name="batch")
    capability = CapabilityClass.objects.get(name="min-40gb")
    jobs = [
        JobFactory(
            owner=people["mia" if i % 2 else "victor"], team=team, queue=queue,
            capability_class=capability, state="running",
        )
        for i in range(50)
    ]  # fmt: skip
    now = timezone.now()
    for job in jobs:
        job_transition(
            job, to=JobState.FAILED, kind=EventKind.FAILED, message="ran past its runtime limit of 1h",
            now=now, failure_reason="TimedOut", finished_at=now,
        )  # fmt: skip
    notifications_collect(now=timezone.now())

    assert send_teams() == 50

    [post] = receiver.requests
    body = post.json()
    assert (post.path, body["event"], len(body["events"])) == ("/hook/vision", "digest", 50)
    assert body["subject"] == "GPU Portal: 50 notifications (my job failed: 50)"
    assert body["text"].splitlines()[2:4] == [
        f"- Job {jobs[0].pk} of victor in queue batch, team vision failed: ran past its runtime "
        "limit of 1h.",
        f"- Job {jobs[1].pk} of mia in queue batch, team vision failed: ran past its runtime "
        "limit of 1h.",
    ]


def test_a_team_without_a_url_hears_nothing(people, cycle, sim_cluster, receiver):
    team_webhook_of(Team.objects.get(name="vision"))  # the row exists, with no URL
    run_until(submit(people["mia"], seconds=30, exit_code=1), JobState.FAILED, cycle, sim_cluster)
    notify()
    assert send_teams() == 0
    assert not NotificationDelivery.objects.filter(team__isnull=False).exists()


# --- set by admins: the page and the API ---------------------------------------------------------


def test_an_admin_sets_a_teams_webhook_on_the_page_and_sees_its_secret(example_policy, ada):
    client = Client()
    client.force_login(ada)
    page = client.get("/manage/team-webhooks/")
    assert page.status_code == 200
    assert 'href="/manage/team-webhooks/vision/"' in page.content.decode()

    answer = client.post(
        "/manage/team-webhooks/vision/",
        {"url": "https://hooks.example.org/vision", "events": ["job_failed", "job_drain_ahead"]},
    )

    assert answer.status_code == 302
    hook = TeamWebhook.objects.get(team__name="vision")
    assert (hook.url, hook.events) == (
        "https://hooks.example.org/vision",
        ["job_failed", "job_drain_ahead"],
    )
    html = client.get("/manage/team-webhooks/vision/").content.decode()
    assert f'data-testid="webhook-secret">{hook.secret}</code>' in html
    client.post("/manage/team-webhooks/vision/secret")
    assert TeamWebhook.objects.get(team__name="vision").secret != hook.secret


def test_a_bad_url_on_the_page_is_a_field_error_and_nothing_is_stored(example_policy, ada):
    client = Client()
    client.force_login(ada)
    team_webhook_set(
        team=Team.objects.get(name="vision"),
        url="https://ok.example/x",
        events=None,
        now=timezone.now(),
    )

    answer = client.post("/manage/team-webhooks/vision/", {"url": "ftp://files.example/x"})

    assert answer.status_code == 200
    assert re.search(
        r'<p class="error" data-field="url">an http:// or https:// address without spaces, '
        r"at most 500 characters</p>",
        answer.content.decode(),
    )
    assert TeamWebhook.objects.get(team__name="vision").url == "https://ok.example/x"


def test_only_admins_open_team_webhooks(example_policy, mia, fiona):
    for user in (mia, fiona):
        client = Client()
        client.force_login(user)
        assert client.get("/manage/team-webhooks/").status_code == 403
        assert client.get("/manage/team-webhooks/vision/").status_code == 403
        assert client.post("/manage/team-webhooks/vision/", {"url": ""}).status_code == 403
    assert not TeamWebhook.objects.exists()


def test_the_api_sets_a_teams_webhook_and_never_shows_its_secret(example_policy, api_as, ada):
    client = api_as(ada)

    answer = client.put(
        "/api/teams/vision/webhook/",
        {"url": "https://hooks.example.org/v", "events": ["job_preempted"], "secret": "mine"},
        format="json",
    )

    assert answer.status_code == 200
    hook = TeamWebhook.objects.get(team__name="vision")
    assert answer.json() == {
        "team": "vision",
        "url": "https://hooks.example.org/v",
        "events": ["job_preempted"],
        "secret_fingerprint": secret_fingerprint(hook.secret),
    }
    assert hook.secret != "mine" and len(hook.secret) == 64  # not settable either
    read = client.get("/api/teams/vision/webhook/")
    assert hook.secret not in read.content.decode()
    rotated = client.post("/api/teams/vision/webhook/secret/")
    hook.refresh_from_db()
    assert rotated.status_code == 200
    assert hook.secret not in rotated.content.decode()
    assert rotated.json()["secret_fingerprint"] == secret_fingerprint(hook.secret)
    assert rotated.json()["secret_fingerprint"] != answer.json()["secret_fingerprint"]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"url": "javascript:alert(1)"}, "url", "an http:// or https:// address"),
        ({"url": "https://a.example/" + "x" * 500}, "url", "an http:// or https:// address"),
        ({"url": 12}, "url", "an http:// or https:// address"),
        ({"events": ["queue_past_target"]}, "events", "is not a valid choice"),
        ({"events": "job_failed"}, "events", 'Expected a list of items but got type "str"'),
    ],
)
def test_the_api_refuses_bad_values_naming_the_field_and_stores_nothing(
    example_policy, api_as, ada, body, field, message
):
    answer = api_as(ada).put("/api/teams/vision/webhook/", body, format="json")

    assert answer.status_code == 400
    assert field in answer.json()
    assert message in str(answer.json()[field])
    hook = TeamWebhook.objects.filter(team__name="vision").first()
    assert hook is None or (hook.url, hook.events) == ("", ["job_failed", "job_preempted"])


def test_only_admins_use_the_team_webhook_api(example_policy, api_as, mia, fiona, ada):
    for user in (mia, fiona):
        assert api_as(user).get("/api/teams/vision/webhook/").status_code == 403
        assert (
            api_as(user)
            .put("/api/teams/vision/webhook/", {"url": "https://x.example/"}, format="json")
            .status_code
            == 403
        )
        assert api_as(user).post("/api/teams/vision/webhook/secret/").status_code == 403
    assert api_as(ada).get("/api/teams/no-such-team/webhook/").status_code == 404
    assert not TeamWebhook.objects.exists()


def _audit_rows(client: Client, **filters: str) -> list[tuple[str, str, str, str, list]]:
    """The audit page's team-webhook rows, newest first: who, from where, which team, what
    (the action), and field → old, new."""
    page = client.get("/manage/audit/", {"model": "teamwebhook", **filters})
    assert page.status_code == 200
    return [
        (
            entry.actor.get_username() if entry.actor else "",
            entry.additional_data["source"],
            entry.object_repr,
            (entry.additional_data or {}).get("action", entry.get_action_display()),
            changes,
        )
        for entry, changes in page.context["rows"]
    ]


def test_team_webhook_changes_on_the_page_are_audited_without_the_secret(example_policy, ada):
    client = Client()
    client.force_login(ada)
    client.get("/manage/team-webhooks/vision/")  # made on first view: no change, no entry
    assert _audit_rows(client) == []

    client.post(
        "/manage/team-webhooks/vision/",
        {"url": "https://hooks.example.org/v", "events": ["job_failed", "job_preempted"]},
    )
    client.post(
        "/manage/team-webhooks/vision/",
        {"url": "https://hooks.example.org/v", "events": ["job_failed", "job_preempted"]},
    )
    client.post("/manage/team-webhooks/vision/", {"url": "", "events": ["job_started"]})
    client.post("/manage/team-webhooks/vision/secret")

    secret = TeamWebhook.objects.get(team__name="vision").secret
    rows = _audit_rows(client)
    assert rows == [
        ("ada", "page", "vision", "secret rotated", [("secret", "", "rotated")]),
        (
            "ada",
            "page",
            "vision",
            "update",
            [
                ("url", "https://hooks.example.org/v", ""),
                ("events", "[job_failed, job_preempted]", "[job_started]"),
            ],
        ),
        # Saving the same values again changed nothing: no entry for it.
        ("ada", "page", "vision", "update", [("url", "", "https://hooks.example.org/v")]),
    ]
    page = client.get("/manage/audit/", {"model": "teamwebhook"}).content.decode()
    assert secret not in page and secret[:12] not in page
    assert all(secret not in str(e.changes) for e in LogEntry.objects.all())
    # Who and when, as every entry has.
    assert all(e.timestamp is not None for e in LogEntry.objects.all())


def test_team_webhook_changes_through_the_api_are_audited_as_the_api(example_policy, api_as, ada):
    client = api_as(ada)
    client.put(
        "/api/teams/vision/webhook/",
        {"url": "https://hooks.example.org/v", "events": ["job_finished"]},
        format="json",
    )
    client.put("/api/teams/vision/webhook/", {"events": ["job_finished"]}, format="json")
    client.post("/api/teams/vision/webhook/secret/")

    browser = Client()
    browser.force_login(ada)
    rows = _audit_rows(browser, source="api")
    assert rows == [
        ("ada", "api", "vision", "secret rotated", [("secret", "", "rotated")]),
        (
            "ada",
            "api",
            "vision",
            "update",
            [
                ("url", "", "https://hooks.example.org/v"),
                ("events", "[job_failed, job_preempted]", "[job_finished]"),
            ],
        ),
    ]
    entry = LogEntry.objects.filter(additional_data__source="api").first()
    assert entry is not None and entry.remote_addr == "127.0.0.1"
    hook = TeamWebhook.objects.get(team__name="vision")
    assert all(hook.secret not in str(e.changes) for e in LogEntry.objects.all())


def test_what_happened_before_a_teams_webhook_was_set_is_not_sent_to_it(
    people, cycle, sim_cluster, receiver
):
    mia = people["mia"]
    mia.email = ""  # nobody hears of this failure: the collector keeps re-reading it
    mia.save(update_fields=["email"])
    run_until(submit(mia, seconds=30, exit_code=1), JobState.FAILED, cycle, sim_cluster)
    notify()

    team_webhook_set(
        team=Team.objects.get(name="vision"),
        url=f"{receiver.url}/vision",
        events=None,
        now=sim_cluster.now(),
    )
    notify()

    assert send_teams() == 0
    assert receiver.requests == []


def test_a_member_is_told_which_of_her_teams_channels_hear_of_her_jobs(people, sim_cluster):
    team_webhook_set(
        team=Team.objects.get(name="vision"),
        url="https://hooks.example.org/vision",
        events=["job_failed", "job_drain_ahead"],
        now=sim_cluster.now(),
    )
    client = Client()
    client.force_login(people["mia"])

    html = client.get("/settings/notifications/").content.decode()

    assert (
        "Your teams' channels also hear of your jobs (set by admins): <strong>vision</strong> "
        "(a job of the team failed, a job of the team will be stopped by a drain)."
    ) in html
    assert "hooks.example.org" not in html  # where it goes is the admins' business
    client.force_login(people["sara"])  # search has no channel
    assert (
        'data-testid="team-channels"' not in client.get("/settings/notifications/").content.decode()
    )
