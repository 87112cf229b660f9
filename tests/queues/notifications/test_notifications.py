"""Notifications reach the job's owner, by e-mail to a real SMTP server and by webhook to a real
HTTP receiver, once per event and channel, as one message for a burst, and nobody else.

Jobs move through the reconcile against the simulated cluster where the event is about a job's
life (started, failed); for a burst of fifty failures the test moves running jobs with the
reconcile's own transition (``job_transition``), as its pass does for each ended pod.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from queues.cluster.adapter import Cluster
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import (
    CapabilityClass,
    DeliveryStatus,
    EventKind,
    GpuClass,
    Job,
    JobEvent,
    JobState,
    Node,
    NotificationDelivery,
    NotificationEstimate,
    NotificationEvent,
    Queue,
    Team,
)
from queues.notifications.delivery import DeliveryFailed, deliveries_send, due_recipients
from queues.notifications.events import notifications_collect
from queues.notifications.preferences import (
    DEFAULTS,
    events_wanted,
    preferences_of,
    preferences_set,
    team_webhook_of,
    webhook_of,
)
from queues.operations.services import (
    node_drain,
    quota_request_approve,
    quota_request_decline,
    quota_request_file,
)
from queues.reconcile.jobs import job_transition
from tests.factories import JobFactory
from tests.queues.notifications.conftest import free_port

pytestmark = pytest.mark.django_db

EVERYTHING = {choice: True for choice in DEFAULTS}


def submit(owner, *, seconds: int = 60, exit_code: int = 0, name: str = "") -> Job:
    return job_submit(
        request=JobRequest(
            owner=owner,
            team=Team.objects.get(name="vision"),
            queue=Queue.objects.get(name="batch"),
            capability_class=CapabilityClass.objects.get(name="min-40gb"),
            image="registry.example/train:1",
            command=["python", "train.py"],
            env={"SIM_DURATION_SECONDS": str(seconds), "SIM_EXIT_CODE": str(exit_code)},
            name=name,
        )
    )


def run_until(job: Job, state: str, cycle, sim_cluster, *, step: float = 10) -> Job:
    for _ in range(60):
        cycle()
        job.refresh_from_db()
        if job.state == state:
            return job
        sim_cluster.advance(step)
    raise AssertionError(f"job {job.pk} is {job.state}, not {state}")


def notify() -> int:
    """What the worker's two tasks do: collect, then send each person's due deliveries."""
    notifications_collect(now=timezone.now())
    sent = 0
    for user_id, channel in sorted(due_recipients(now=timezone.now())):
        sent += deliveries_send(user_id=user_id, channel=channel, now=timezone.now())
    return sent


def test_a_failed_job_is_mailed_to_its_owner_with_the_reason_in_words(
    people, cycle, sim_cluster, smtp_server
):
    mia = people["mia"]
    job = submit(mia, seconds=60, exit_code=3, name="resnet")
    job = run_until(job, JobState.RUNNING, cycle, sim_cluster)
    job = run_until(job, JobState.FAILED, cycle, sim_cluster)

    assert notify() == 1

    failed = job.events.get(kind=EventKind.FAILED)
    assert failed.message.endswith(" exited with code 3")
    [message] = smtp_server.messages  # started is off by default: only the failure
    assert message["To"] == "mia@example.org"
    assert message["Subject"] == f"Job {job.pk} (resnet) failed"
    assert message.get_content().strip() == (
        f"Job {job.pk} (resnet) in queue batch, team vision failed: {failed.message}."
    )
    assert message["X-GPUPortal-Delivery"] == f"gpuportal-{NotificationDelivery.objects.get().pk}"
    assert NotificationDelivery.objects.get().status == DeliveryStatus.SENT


def test_a_webhook_gets_a_signed_slack_compatible_body_for_the_events_chosen(
    people, cycle, sim_cluster, receiver, smtp_server
):
    mia = people["mia"]
    preferences_set(
        user=mia,
        choices={("job_started", "webhook"): True, ("job_failed", "email"): False},
        webhook_url=receiver.url,
    )
    job = run_until(submit(mia, seconds=600), JobState.RUNNING, cycle, sim_cluster)

    assert notify() == 1

    [post] = receiver.requests
    started = job.events.get(kind=EventKind.STARTED)
    body = post.json()
    assert body["text"] == (f"Job {job.pk} started in queue batch, team vision: {started.message}.")
    assert (body["event"], body["subject"]) == ("job_started", f"Job {job.pk} started")
    assert [e["details"]["job"] for e in body["events"]] == [job.pk]
    secret = webhook_of(mia).secret
    timestamp = post.headers["X-GPUPortal-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + post.body, hashlib.sha256)
    assert post.headers["X-GPUPortal-Signature"] == "sha256=" + expected.hexdigest()
    assert post.headers["Content-Type"] == "application/json"
    assert smtp_server.messages == []  # started is off by e-mail


def test_fifty_jobs_failing_at_once_are_one_message_listing_them(people, smtp_server, receiver):
    mia = people["mia"]
    preferences_set(user=mia, choices={}, webhook_url=receiver.url)
    team, queue = Team.objects.get(name="vision"), Queue.objects.get(name="batch")
    capability = CapabilityClass.objects.get(name="min-40gb")
    jobs = JobFactory.create_batch(
        50, owner=mia, team=team, queue=queue, capability_class=capability, state="running"
    )
    now = timezone.now()
    for job in jobs:
        assert job_transition(
            job,
            to=JobState.FAILED,
            kind=EventKind.FAILED,
            message="ran past its runtime limit of 1h",
            now=now,
            failure_reason="TimedOut",
            finished_at=now,
        )

    assert notify() == 100  # fifty by e-mail, fifty by webhook

    [message] = smtp_server.messages
    assert message["Subject"] == "GPU Portal: 50 notifications (my job failed: 50)"
    lines = message.get_content().strip().splitlines()
    assert lines[2:] == [
        f"- Job {j.pk} in queue batch, team vision failed: ran past its runtime limit of 1h."
        for j in jobs
    ]
    [post] = receiver.requests
    assert post.json()["event"] == "digest"
    assert len(post.json()["events"]) == 50
    assert post.json()["text"].splitlines() == message.get_content().strip().splitlines()


def test_each_event_goes_out_once_however_often_collected_and_sent(
    people, cycle, sim_cluster, smtp_server
):
    job = submit(people["mia"], seconds=30, exit_code=1)
    run_until(job, JobState.FAILED, cycle, sim_cluster)

    for _ in range(3):
        notifications_collect(now=timezone.now())
    assert NotificationDelivery.objects.count() == 1
    user_id = people["mia"].pk
    # Two senders at once: the first claims the row, the second finds nothing to send.
    assert deliveries_send(user_id=user_id, channel="email", now=timezone.now()) == 1
    assert deliveries_send(user_id=user_id, channel="email", now=timezone.now()) == 0
    assert notify() == 0
    assert len(smtp_server.messages) == 1


def test_nobody_but_the_owner_hears_of_a_job(people, cycle, sim_cluster, smtp_server, receiver):
    for name in ("victor", "sara", "outsider"):
        preferences_set(user=people[name], choices=EVERYTHING, webhook_url=receiver.url)
    job = submit(people["mia"], seconds=30, exit_code=1)
    run_until(job, JobState.FAILED, cycle, sim_cluster)

    notify()

    assert [m["To"] for m in smtp_server.messages] == ["mia@example.org"]
    assert receiver.requests == []
    assert set(NotificationDelivery.objects.values_list("user__username", flat=True)) == {"mia"}


def test_a_send_that_fails_is_tried_again_and_then_goes_out_once(
    people, cycle, sim_cluster, smtp_server, settings
):
    job = submit(people["mia"], seconds=30, exit_code=1)
    run_until(job, JobState.FAILED, cycle, sim_cluster)
    notifications_collect(now=timezone.now())
    settings.EMAIL_PORT = free_port()  # nothing listens there

    with pytest.raises(DeliveryFailed):
        deliveries_send(user_id=people["mia"].pk, channel="email", now=timezone.now())

    row = NotificationDelivery.objects.get()
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert "Connection refused" in row.last_error
    assert row.next_attempt_at - row.claimed_at == timedelta(seconds=10)
    settings.EMAIL_PORT = smtp_server.port
    assert notify() == 0  # it waits out its back-off first
    NotificationDelivery.objects.update(next_attempt_at=timezone.now())
    assert notify() == 1
    row.refresh_from_db()
    assert (row.status, row.attempts, len(smtp_server.messages)) == (DeliveryStatus.SENT, 2, 1)


def test_a_webhook_answering_an_error_is_tried_again(people, receiver, cycle, sim_cluster):
    preferences_set(
        user=people["mia"], choices={("job_failed", "email"): False}, webhook_url=receiver.url
    )
    job = submit(people["mia"], seconds=30, exit_code=1)
    run_until(job, JobState.FAILED, cycle, sim_cluster)
    receiver.status = 500

    with pytest.raises(DeliveryFailed, match="the webhook answered 500"):
        notify()

    receiver.status = 200
    NotificationDelivery.objects.update(next_attempt_at=timezone.now())  # its back-off passed
    assert notify() == 1
    assert len(receiver.requests) == 2  # the refused one and the one that went through
    assert (
        receiver.requests[0].headers["X-GPUPortal-Delivery"]
        == receiver.requests[1].headers["X-GPUPortal-Delivery"]
    )


def test_a_quota_decision_reaches_the_member_who_asked(people, ada, smtp_server):
    mia = people["mia"]
    ada.email = "ada@example.org"
    ada.save(update_fields=["email"])
    now = timezone.now()
    h100 = GpuClass.objects.get(name="h100-80gb")
    vision = Team.objects.get(name="vision")
    first = quota_request_file(
        by=mia, team=vision, gpu_class=h100, nominal=Decimal(10), borrowing_limit=Decimal(8),
        justification="a paper deadline", now=now,
    )  # fmt: skip
    second = quota_request_file(
        by=mia, team=vision, gpu_class=h100, nominal=Decimal(12), borrowing_limit=Decimal(8),
        justification="more", now=now,
    )  # fmt: skip
    quota_request_decline(request=second, by=ada, reason="the cluster is full until March", now=now)

    assert notify() == 1
    [message] = smtp_server.messages
    assert message["To"] == "mia@example.org"
    assert message["Subject"] == f"Quota request {second.pk} declined"
    assert message.get_content().strip() == (
        f"Your quota request {second.pk} for team vision, h100-80gb (nominal 12.000, borrowing "
        "8.000) was declined by ada: the cluster is full until March"
    )

    quota_request_approve(request=first, by=ada, now=timezone.now())
    assert notify() == 1
    assert smtp_server.messages[1]["Subject"] == f"Quota request {first.pk} approved"


def test_a_drain_ahead_of_the_runtime_limit_warns_the_owner_once(
    people, cycle, sim_cluster, smtp_server
):
    job = run_until(submit(people["mia"], seconds=7200), JobState.RUNNING, cycle, sim_cluster)
    deadline = timezone.now() + timedelta(minutes=30)
    Node.objects.filter(name__in=job.nodes).update(
        maintenance="drained", maintenance_reason="firmware update", maintenance_deadline=deadline
    )

    assert notify() == 1
    assert notify() == 0
    [message] = smtp_server.messages
    assert message["Subject"] == (
        f"Job {job.pk} will be stopped by a drain at {deadline:%Y-%m-%d %H:%M} UTC"
    )
    assert "firmware update" in message.get_content()
    assert "it checkpoints every 30 min" in message.get_content()


def test_defaults_are_failed_and_preempted_on_and_started_off(mia):
    chosen = preferences_of(mia)
    assert chosen[(NotificationEvent.JOB_FAILED, "email")] is True
    assert chosen[(NotificationEvent.JOB_PREEMPTED, "email")] is True
    assert chosen[(NotificationEvent.JOB_STARTED, "email")] is False
    assert chosen[(NotificationEvent.JOB_FINISHED, "email")] is False


def test_events_before_the_first_collection_are_history(mia, smtp_server):
    mia.email = "mia@example.org"
    mia.save(update_fields=["email"])
    job = JobFactory(owner=mia, state="failed")
    JobEvent.objects.create(job=job, at=timezone.now(), kind=EventKind.FAILED, message="old")

    assert notify() == 0
    assert smtp_server.messages == []
    # Later news goes out; the history before the first collection still does not.
    newer = JobFactory(owner=mia, state="failed")
    JobEvent.objects.create(job=newer, at=timezone.now(), kind=EventKind.FAILED, message="new")
    assert notify() == 1
    assert [m["Subject"] for m in smtp_server.messages] == [f"Job {newer.pk} failed"]


def test_a_latest_start_moved_later_by_more_than_the_threshold_is_told_once(
    people, smtp_server, settings
):
    # The reconcile stores each waiting job's "at the latest"; here the test moves it.
    mia = people["mia"]
    preferences_set(user=mia, choices={("job_start_later", "email"): True}, webhook_url=None)
    start = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    job = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        state="pending",
        estimated_start=start,
    )
    assert notify() == 0  # the first estimate is the mark, not news
    Job.objects.filter(pk=job.pk).update(estimated_start=start + timedelta(minutes=59))
    assert notify() == 0  # within NOTIFICATION_START_LATER_MINUTES (60)
    later = start + timedelta(hours=2, minutes=5)
    Job.objects.filter(pk=job.pk).update(estimated_start=later)
    assert notify() == 1
    assert notify() == 0

    [message] = smtp_server.messages
    assert (
        message["Subject"] == f"Job {job.pk} starts later: at the latest {later:%Y-%m-%d %H:%M} UTC"
    )
    assert message.get_content().strip() == (
        f"Job {job.pk} in queue batch now starts at the latest {later:%Y-%m-%d %H:%M} UTC, "
        f"2 h 5 min later than {start:%Y-%m-%d %H:%M} UTC."
    )


def test_events_wanted_are_the_defaults_and_what_someone_turned_on(people):
    mia, vision = people["mia"], Team.objects.get(name="vision")
    defaults = {
        e.value
        for e in (
            NotificationEvent.JOB_FAILED,
            NotificationEvent.JOB_PREEMPTED,
            NotificationEvent.JOB_DRAIN_AHEAD,
            NotificationEvent.QUOTA_REQUEST_DECIDED,
            NotificationEvent.QUEUE_PAST_TARGET,
            NotificationEvent.BUDGET_EXCEEDED,
        )
    }
    assert events_wanted() == defaults
    # turned off by someone: a default stays wanted (everyone else who never chose hears it)
    preferences_set(user=mia, choices={("job_failed", "email"): False}, webhook_url=None)
    assert events_wanted() == defaults
    preferences_set(user=mia, choices={("job_started", "webhook"): True}, webhook_url=None)
    assert events_wanted() == defaults | {"job_started"}
    # a team's webhook without a URL hears nothing; with one, its events are wanted
    hook = team_webhook_of(vision)
    hook.events = ["job_finished"]
    hook.save()
    assert events_wanted() == defaults | {"job_started"}
    hook.url = "https://hooks.example.org/vision"
    hook.save()
    assert events_wanted() == defaults | {"job_started", "job_finished"}


def test_starts_nobody_hears_of_make_no_delivery_and_reach_whoever_turns_them_on(
    people, smtp_server
):
    mia = people["mia"]
    assert notify() == 0  # the first collection: what came before is history
    quiet = JobFactory(owner=mia, state="running")
    JobEvent.objects.create(job=quiet, at=timezone.now(), kind=EventKind.STARTED, message="n1")
    assert notify() == 0  # nobody hears of starts
    assert not NotificationDelivery.objects.exists()
    preferences_set(user=mia, choices={("job_started", "email"): True}, webhook_url=None)
    heard = JobFactory(owner=mia, state="running")
    JobEvent.objects.create(job=heard, at=timezone.now(), kind=EventKind.STARTED, message="n2")
    notify()
    # one message: the start after she turned them on (one just before, still inside the
    # collection's re-read of late commits, may come with it, as it always could)
    [message] = smtp_server.messages
    assert f"Job {heard.pk} started in queue" in message.get_content()
    assert (
        NotificationDelivery.objects.filter(user=mia, key__startswith=f"job:{heard.pk}:").count()
        == 1
    )


def test_a_later_start_nobody_hears_of_leaves_no_mark_and_counts_from_turning_it_on(
    people, smtp_server
):
    mia = people["mia"]
    start = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    job = JobFactory(owner=mia, state="pending", estimated_start=start)
    assert notify() == 0
    assert not NotificationEstimate.objects.exists()  # nobody hears of later starts
    Job.objects.filter(pk=job.pk).update(estimated_start=start + timedelta(hours=3))
    preferences_set(user=mia, choices={("job_start_later", "email"): True}, webhook_url=None)
    assert notify() == 0  # the estimate when she turned it on is the mark
    later = start + timedelta(hours=5)
    Job.objects.filter(pk=job.pk).update(estimated_start=later)
    assert notify() == 1
    [message] = smtp_server.messages
    assert f"2 h later than {start + timedelta(hours=3):%Y-%m-%d %H:%M} UTC" in (
        message.get_content()
    )


def test_a_queue_an_hour_past_its_wait_target_reaches_admins_and_finance_only(
    people, ada, fiona, smtp_server
):
    for user in (ada, fiona):
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    preferences_set(user=people["mia"], choices=EVERYTHING, webhook_url=None)
    batch = Queue.objects.get(name="batch")  # wait target 2h
    team = Team.objects.get(name="vision")
    JobFactory(owner=people["mia"], team=team, queue=batch, state="pending",
               submitted_at=timezone.now() - timedelta(hours=2, minutes=50))  # fmt: skip
    assert notify() == 0  # past its target, but not yet for an hour
    JobFactory(owner=people["mia"], team=team, queue=batch, state="pending",
               submitted_at=timezone.now() - timedelta(hours=3, minutes=10))  # fmt: skip

    assert notify() == 2
    assert notify() == 0  # once a day
    assert sorted(m["To"] for m in smtp_server.messages) == ["ada@example.org", "fiona@example.org"]
    assert smtp_server.messages[0]["Subject"] == "Queue batch is past its wait target"
    assert smtp_server.messages[0].get_content().strip() == (
        "Queue batch is past its wait target of 2 h: its longest-waiting job has waited "
        "3 h 10 min, and 2 job(s) wait."
    )


def test_a_drain_warns_ahead_then_says_what_was_lost_when_it_stops_the_job(
    people, cycle, sim_cluster, smtp_server
):
    job = run_until(submit(people["mia"], seconds=7200), JobState.RUNNING, cycle, sim_cluster)
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    deadline = sim_cluster.now() + timedelta(minutes=10)
    node_drain(
        cluster=adapter,
        nodes=list(Node.objects.filter(name__in=job.nodes)),
        reason="PSU swap",
        until=sim_cluster.now() + timedelta(hours=4),
        deadline=deadline,
    )
    adapter.close()
    cycle()

    assert notify() == 1
    ahead = smtp_server.messages[0]
    assert (
        ahead["Subject"]
        == f"Job {job.pk} will be stopped by a drain at {deadline:%Y-%m-%d %H:%M} UTC"
    )
    assert f"runs on {job.nodes[0]}, which will be drained (PSU swap)" in ahead.get_content()

    sim_cluster.advance(11 * 60)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.PREEMPTED
    assert notify() == 1
    stopped = smtp_server.messages[1]
    preempted = job.events.get(kind=EventKind.PREEMPTED)
    # It started about 11 minutes before the deadline passed, under its first 30-minute
    # checkpoint interval: all of it is lost.
    assert preempted.message.endswith("; about 11 min of work lost since its last checkpoint")
    assert stopped["Subject"] == f"Job {job.pk} was preempted"
    assert stopped.get_content().strip() == (
        f"Job {job.pk} in queue batch, team vision was stopped and goes back to the queue: "
        f"{preempted.message}."
    )


def test_a_requeued_job_waits_since_it_was_requeued_not_since_it_was_submitted(
    people, ada, smtp_server
):
    ada.email = "ada@example.org"
    ada.save(update_fields=["email"])
    batch = Queue.objects.get(name="batch")  # wait target 2h
    team = Team.objects.get(name="vision")
    # Submitted 5 h ago, ran 4 h 50 min, preempted: back in the queue 10 minutes ago.
    preempted = JobFactory(owner=people["mia"], team=team, queue=batch, state="pending",
                           submitted_at=timezone.now() - timedelta(hours=5), attempts=1)  # fmt: skip
    JobEvent.objects.create(
        job=preempted, at=timezone.now() - timedelta(minutes=10), kind=EventKind.REQUEUED,
        message="pods gone; back in the queue (attempt 2)",
    )  # fmt: skip
    assert notify() == 0

    JobFactory(owner=people["mia"], team=team, queue=batch, state="pending",
               submitted_at=timezone.now() - timedelta(hours=3, minutes=10))  # fmt: skip
    assert notify() == 1
    assert smtp_server.messages[0].get_content().strip() == (
        "Queue batch is past its wait target of 2 h: its longest-waiting job has waited "
        "3 h 10 min, and 2 job(s) wait."
    )
