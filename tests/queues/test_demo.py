"""The demo tells the truth: real-speed jobs whose pods end within their runtime limits, and a
load generator that keeps queues waiting through the same service as the form."""

from __future__ import annotations

import random
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from queues.jobs.requests import job_request_errors
from queues.management.commands.demo_load import LOAD, PROFILES, WAITING, demo_load_step
from queues.management.commands.rundemo import Command as RunDemo
from queues.management.commands.seed_demo import DEMO_JOBS, DEMO_TEAM_WEBHOOK, demo_request
from queues.models import EventKind, Job, JobEvent, JobState, NotificationDelivery, TeamWebhook
from queues.notifications.events import notifications_collect
from simcluster.kubelet import utilization_between, utilization_profile
from simcluster.nodes import SimulationSettings

pytestmark = pytest.mark.django_db


def _run_seconds(job: Job) -> int:
    return int(job.env["SIM_DURATION_SECONDS"])


def test_seeded_jobs_run_minutes_and_end_before_their_limits(example_policy):
    out = StringIO()
    call_command("seed_demo", "--jobs", stdout=out)

    # (Besides the history's finished jobs, chargeback's seed_demo_history.)
    jobs = list(Job.objects.filter(state=JobState.PENDING))
    assert len(jobs) == len(DEMO_JOBS)
    for job in jobs:
        assert job.runtime_limit.total_seconds() <= 3600
        assert 0 < _run_seconds(job) < job.runtime_limit.total_seconds()
    logins = out.getvalue()
    assert "usable password" not in logins
    assert "finance  fiona  chargeback statements" in logins


def test_the_demo_seeds_a_team_webhook_that_sends_nothing_and_says_so(example_policy):
    call_command("seed_demo", "--jobs", stdout=StringIO())
    call_command("seed_demo", "--jobs", stdout=StringIO())  # once

    hook = TeamWebhook.objects.get()
    assert (hook.team.name, hook.url, hook.events) == (*DEMO_TEAM_WEBHOOK, [])
    # A job of the team fails after it was set: its owner's choices apply, the team's URL (which
    # nothing in the demo answers) gets nothing to send.
    notifications_collect(
        now=timezone.now()
    )  # the first collection: the timeline so far is history
    job = Job.objects.filter(team=hook.team).first()
    at = timezone.now() + timedelta(seconds=1)
    JobEvent.objects.create(job=job, at=at, kind=EventKind.FAILED, message="exit code 1")
    notifications_collect(now=at)
    assert not NotificationDelivery.objects.filter(team=hook.team).exists()
    admin = Client()
    admin.force_login(get_user_model().objects.get(username="ada"))
    listed = admin.get("/manage/team-webhooks/").content.decode()
    assert f"<code>{hook.url}</code>" in listed
    assert 'data-testid="no-events">none: nothing is sent</span>' in listed
    edit = admin.get(f"/manage/team-webhooks/{hook.team.name}/").content.decode()
    assert "No events are chosen: nothing is sent to this URL until some are." in edit


def test_the_load_generator_tops_each_queue_up_and_then_waits(example_policy):
    rng = random.Random(7)

    first = demo_load_step(rng=rng)

    assert sorted(j.queue.name for j in first) == sorted(WAITING)
    for job in first:
        assert job.state == JobState.PENDING
        assert 0 < _run_seconds(job) < job.runtime_limit.total_seconds() <= 20 * 60
    for _ in range(5):
        demo_load_step(rng=rng)
    counts = {q: Job.objects.filter(queue__name=q, state="pending").count() for q in WAITING}
    assert counts == WAITING  # nothing runs here (no reconcile): topped up to, never beyond


@pytest.mark.parametrize("template", LOAD, ids=lambda t: f"{t[2]}-{t[3]}")
def test_every_load_template_is_a_request_the_portal_accepts(example_policy, template):
    user, team, queue, capability, pods, gpus, minutes, extra = template
    request = demo_request(
        user=get_user_model().objects.get(username=user),
        team=team,
        queue=queue,
        capability=capability,
        pods=pods,
        gpus=gpus,
        minutes=minutes,
        run_seconds=minutes * 30,
        extra=extra,
    )

    assert job_request_errors(request) == {}


def test_the_demo_runs_at_real_speed_with_a_load_generator():
    parser = RunDemo().create_parser("manage.py", "rundemo")
    options = parser.parse_args([])
    assert (options.speed, options.load_interval) == (1.0, 20.0)


def test_apply_policy_summary_is_one_line(db):
    out = StringIO()
    call_command("apply_policy", "examples/policy.yaml", "--summary", stdout=out)
    assert out.getvalue().strip().startswith("examples/policy.yaml: ")
    assert "\n" not in out.getvalue().strip()


def test_demo_jobs_keep_their_gpus_busy_to_varied_degrees(example_policy):
    call_command("seed_demo", "--jobs", stdout=StringIO())

    profiles = [
        job.env.get("SIM_GPU_UTILIZATION", "") for job in Job.objects.filter(state=JobState.PENDING)
    ]
    # Each ends at its last step's percent: some busy, some idle-heavy.
    last = sorted(float(p.split(",")[-1].split(":")[-1]) for p in profiles)
    assert len(last) == len(DEMO_JOBS)
    assert last[0] <= 10 and last[-1] >= 85
    assert sum(1 for p in last if p < 25) >= 3


def test_load_jobs_have_varied_gpu_utilization_profiles(example_policy):
    assert {(t[2], t[3]) for t in LOAD} == set(PROFILES)
    averages = {}
    for profiles in PROFILES.values():
        for text in profiles:
            pod = {
                "metadata": {"annotations": {}},
                "spec": {"containers": [{"env": [{"name": "SIM_GPU_UTILIZATION", "value": text}]}]},
            }
            profile = utilization_profile(pod, SimulationSettings())
            assert profile != ((0.0, 100.0),), f"{text} does not parse"
            averages[text] = utilization_between(profile, 0, 300)
    # some pods keep their GPUs busy, some mostly idle, some wait on data before they compute
    assert max(averages.values()) >= 90
    assert min(averages.values()) <= 15
    assert averages["0:10,90:90"] == 66.0  # 90 s at 10 %, 210 s at 90 % over 5 minutes

    rng = random.Random(3)
    jobs = demo_load_step(rng=rng) + demo_load_step(rng=rng)
    assert all(
        j.env["SIM_GPU_UTILIZATION"] in PROFILES[(j.queue.name, j.capability_class.name)]
        for j in jobs
    )
