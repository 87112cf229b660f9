"""Members' job pages: submit with preview, my jobs, one job, cancel, resubmit."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, GpuClass, Job, JobState, Node, Queue, Team

pytestmark = pytest.mark.django_db

FORM = {
    "team": "vision",
    "queue": "training",
    "capability_class": "bf16-large",
    "pods": "1",
    "gpus_per_pod": "4",
    "cpu_millicores_per_pod": "4",
    "memory_mib_per_pod": "32 GiB",
    "runtime_limit": "6h",
    "image": "registry.example/train:1",
    "command": "python\ntrain.py",
    "args": "--epochs\n3",
    "env": "WANDB_MODE=offline",
}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(user, team="vision", queue="batch", capability="any-gpu", **fields):
    return job_submit(
        request=JobRequest(
            owner=user,
            team=Team.objects.get(name=team),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            image="registry.example/train:1",
            command=["python", "train.py"],
            **fields,
        )
    )


@pytest.fixture
def a100(example_policy):
    Node.objects.create(
        name="a100-1", gpu_class=GpuClass.objects.get(name="a100-80gb"), gpu_count=8
    )


def test_submitting_stores_the_job_as_typed_and_shows_it(mia):
    response = logged_in(mia).post("/jobs/new", FORM, follow=True)

    job = Job.objects.get()
    assert response.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert (job.team.name, job.queue.name, job.capability_class.name) == (
        "vision",
        "training",
        "bf16-large",
    )
    assert job.command == ["python", "train.py"]
    assert job.args == ["--epochs", "3"]
    assert job.env == {"WANDB_MODE": "offline"}
    assert job.runtime_limit == timedelta(hours=6)
    assert f"Job {job.pk} submitted to queue training." in response.content.decode()


def test_the_queues_terms_are_checked_field_by_field_and_nothing_is_stored(mia):
    form = {**FORM, "runtime_limit": "8d", "pods": "5", "gpus_per_pod": "8", "priority": "11"}

    response = logged_in(mia).post("/jobs/new", form)

    assert response.status_code == 200
    errors = response.context["form"].errors
    assert errors["runtime_limit"] == ["8d is over queue training's maximum of 7d"]
    assert errors["gpus_per_pod"] == [
        "5 pod(s) × 8 = 40 GPU-equivalents is over queue training's maximum of 32 per job"
    ]
    assert errors["priority"] == ["must be from 0 to 10 in queue training"]
    assert Job.objects.count() == 0


def test_a_queue_the_team_may_not_use_and_a_malformed_field(mia):
    form = {**FORM, "queue": "inference", "capability_class": "inference-16gb", "env": "not a pair"}

    errors = logged_in(mia).post("/jobs/new", form).context["form"].errors

    assert errors["queue"] == ["team vision may not submit to queue inference"]
    assert errors["env"] == [
        "line 1: write NAME=value, or NAME=secret:<secret>/<key> for a key of a Secret"
    ]


def test_preview_says_it_would_start_now_with_its_cost_and_stores_nothing(a100, mia):
    response = logged_in(mia).post("/jobs/new", {**FORM, "preview": "1"})

    html = response.content.decode()
    assert "Would start now on <strong>a100-80gb</strong> (nominal capacity)." in html
    assert "Cost: 12.00 EUR per hour on a100-80gb." in html
    assert Job.objects.count() == 0


def test_preview_as_an_htmx_partial(a100, mia):
    response = logged_in(mia).post("/jobs/new", {**FORM, "preview": "1"}, HTTP_HX_REQUEST="true")

    html = response.content.decode()
    assert response.templates[0].name == "jobs/_form.html"
    assert 'id="preview"' in html
    assert "<header" not in html and "<footer" not in html  # never a page inside the box


def test_an_htmx_preview_with_a_bad_field_marks_it_as_submit_does(a100, mia):
    bad = {
        **FORM,
        "pods": "two",
        "runtime_limit": "5h",
        "queue": "interactive",
        "capability_class": "any-gpu",
        "gpus_per_pod": "1",
    }
    client = logged_in(mia)

    preview = client.post("/jobs/new", {**bad, "preview": "1"}, HTTP_HX_REQUEST="true")
    submitted = client.post("/jobs/new", bad)

    assert (
        preview.context["form"].errors
        == submitted.context["form"].errors
        == {
            "pods": ["must be a whole number"],
            # every error at once: the queue's terms are judged although pods is unreadable
            "runtime_limit": ["5h is over queue interactive's maximum of 4h"],
            "declared_gpu_memory_gb": [
                "time-sliced GPUs share their memory: declare how much your job uses"
            ],
        }
    )
    html = preview.content.decode()
    assert "<header" not in html
    assert "Nothing was submitted: fix the fields marked above." in html
    assert '<p class="error" data-field="runtime_limit">5h is over queue interactive' in html
    assert Job.objects.count() == 0


def test_a_preview_breaking_a_rule_marks_the_field(a100, mia):
    response = logged_in(mia).post(
        "/jobs/new",
        {**FORM, "runtime_limit": "8d", "preview": "1"},
        HTTP_HX_REQUEST="true",
    )

    html = response.content.decode()
    assert '<p class="error" data-field="runtime_limit">8d is over queue training' in html
    assert "Nothing was submitted: fix the field marked above." in html


def test_cpu_and_memory_are_read_in_cores_and_gib_or_millicores_and_mib(a100, mia):
    client = logged_in(mia)
    client.post(
        "/jobs/new", {**FORM, "cpu_millicores_per_pod": "2.5", "memory_mib_per_pod": "16GiB"}
    )
    client.post(
        "/jobs/new", {**FORM, "cpu_millicores_per_pod": "500m", "memory_mib_per_pod": "1536 MiB"}
    )

    assert list(
        Job.objects.order_by("pk").values_list("cpu_millicores_per_pod", "memory_mib_per_pod")
    ) == [(2500, 16384), (500, 1536)]
    page = client.get(f"/jobs/{Job.objects.order_by('pk').first().pk}/").content.decode()
    assert "2.5 cores" in page and "16 GiB" in page


def test_my_jobs_are_listed_and_filtered(mia, example_policy):
    from django.contrib.auth import get_user_model

    noah = get_user_model().objects.get(username="noah")
    mine = submit(mia)
    teammates = submit(noah, team="nlp")
    other = submit(get_user_model().objects.get(username="sam"), team="speech")
    client = logged_in(mia)

    assert [j.pk for j in client.get("/jobs/").context["page"]] == [mine.pk]
    assert [j.pk for j in client.get("/jobs/?mine=0").context["page"]] == [teammates.pk, mine.pk]
    assert [j.pk for j in client.get("/jobs/?mine=0&team=nlp").context["page"]] == [teammates.pk]
    assert other.pk not in [j.pk for j in client.get("/jobs/?mine=0").context["page"]]
    assert list(client.get("/jobs/?state=running").context["page"]) == []


def test_the_job_list_costs_the_same_queries_however_many_jobs(mia, django_assert_max_num_queries):
    for _ in range(3):
        submit(mia)
    client = logged_in(mia)
    client.get("/jobs/")
    for _ in range(20):
        submit(mia)

    with django_assert_max_num_queries(12):
        response = client.get("/jobs/")

    assert len(response.context["page"]) == 23


def test_a_job_page_shows_reasons_hints_and_the_timeline(mia):
    job = submit(mia)
    Job.objects.filter(pk=job.pk).update(
        pending_reasons=[
            {
                "code": "QuotaExceeded",
                "message": "team vision: h100-80gb quota 8/8 in use",
                "details": {},
                "hint": "capability class `any-gpu` would also match the free L4s",
            }
        ],
        position=2,
        queue_length=5,
    )

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    assert "position 2 of 5 in queue batch" in html
    assert "team vision: h100-80gb quota 8/8 in use" in html
    assert "→ capability class `any-gpu` would also match the free L4s" in html
    assert "submitted to queue batch" in html
    assert 'hx-trigger="every 3s"' in html  # it refreshes itself while the job is live


def test_times_inside_reasons_and_the_timeline_are_shown_in_the_viewers_zone(mia):
    from queues.models import JobEvent

    job = submit(mia)
    Job.objects.filter(pk=job.pk).update(
        pending_reasons=[
            {
                "code": "Maintenance",
                "message": "1 of 3 nodes is in maintenance (n2: <ECC>, back 2026-12-03 14:00 UTC)",
                "details": {},
                "hint": "n2 is expected back at 2026-12-03 14:00 UTC",
            }
        ]
    )
    JobEvent.objects.create(
        job=job,
        at=job.submitted_at,
        kind="requeued",
        message="pods gone; not admitted before 2026-12-03T08:01:30+00:00",
    )

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    # Marked up as <time> (localtime.js shows it in the viewer's zone; UTC stays on hover),
    # and the rest of the text still escaped.
    assert (
        "(n2: &lt;ECC&gt;, back "
        '<time datetime="2026-12-03T14:00:00Z">2026-12-03 14:00 UTC</time>)' in html
    )
    assert 'back at <time datetime="2026-12-03T14:00:00Z">2026-12-03 14:00 UTC</time>' in html
    assert (
        'not admitted before <time datetime="2026-12-03T08:01:30Z">'
        "2026-12-03T08:01:30+00:00</time>" in html
    )


def test_the_whole_job_page_follows_the_job_and_stops_when_it_ended(mia):
    job = submit(mia)
    client = logged_in(mia)

    live = client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    ended = client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").content.decode()

    assert "<html" not in live and "<header" not in live
    assert f'hx-get="/jobs/{job.pk}/" hx-trigger="every 3s"' in live
    assert 'data-testid="cancel"' in live and 'id="alternatives"' in live
    # ended: no more polling, no cancel button, no suggestions
    assert "hx-trigger" not in ended.split('id="logs"')[0]
    assert 'data-testid="cancel"' not in ended and 'id="alternatives"' not in ended


def test_each_start_of_a_requeued_job_is_shown_and_elapsed_time_against_its_limit(mia):
    from datetime import UTC, datetime

    from queues.models import EventKind, JobEvent

    job = submit(mia, runtime_limit=timedelta(hours=4))
    first = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    second = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
    for at in (first, second):
        JobEvent.objects.create(job=job, at=at, kind=EventKind.STARTED, message="running")
    Job.objects.filter(pk=job.pk).update(
        state=JobState.SUCCEEDED,
        started_at=second,
        finished_at=second + timedelta(hours=1),
        attempts=1,
    )

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    assert 'attempt 1: <time datetime="2026-12-03T08:00:00+00:00">' in html
    assert 'attempt 2: <time datetime="2026-12-03T09:30:00+00:00">' in html
    assert '<p data-testid="progress">1h of 4h (25 %)</p>' in html


@pytest.mark.parametrize(("requeues", "shown"), [(0, "never"), (1, "1 time"), (2, "2 times")])
def test_the_page_and_the_api_give_one_requeue_count(mia, api_as, requeues, shown):
    # The page said "Attempts 1" where the API said 0, and 2 where it said 1.
    job = submit(mia)
    Job.objects.filter(pk=job.pk).update(attempts=requeues)

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()
    api = api_as(mia).get(f"/api/jobs/{job.pk}/").json()

    assert f'<dt>Requeued</dt><dd data-testid="requeued">{shown}</dd>' in html
    assert api["attempts"] == requeues


def test_other_teams_jobs_are_not_found(mia, example_policy):
    from django.contrib.auth import get_user_model

    theirs = submit(get_user_model().objects.get(username="sam"), team="speech")

    assert logged_in(mia).get(f"/jobs/{theirs.pk}/").status_code == 404
    assert logged_in(mia).post(f"/jobs/{theirs.pk}/cancel").status_code == 404


def test_only_the_owner_or_an_admin_cancels(mia, ada, example_policy):
    from django.contrib.auth import get_user_model

    noah = get_user_model().objects.get(username="noah")
    job = submit(mia, team="nlp")

    assert logged_in(noah).post(f"/jobs/{job.pk}/cancel").status_code == 403
    response = logged_in(mia).post(f"/jobs/{job.pk}/cancel", follow=True)

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert f"Job {job.pk} cancelled." in response.content.decode()
    again = logged_in(ada).post(f"/jobs/{job.pk}/cancel", follow=True)
    assert f"Job {job.pk} has already ended (cancelled)." in again.content.decode()


def test_resubmitting_prefills_the_form_with_the_old_job(mia):
    job = submit(mia, pods=2, gpus_per_pod=3, args=["--lr", "3e-4"], env={"SEED": "7"})

    form = logged_in(mia).get(f"/jobs/new?from={job.pk}").context["form"]

    assert form.initial["pods"] == 2
    assert form["args"].value() == "--lr\n3e-4"
    assert form["env"].value() == "SEED=7"
    assert form["runtime_limit"].value() == "12h"


def test_a_waiting_job_page_offers_what_would_start_it_sooner(mia, example_policy):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from queues.models import Quota
    from tests.factories import JobFactory

    t4 = GpuClass.objects.get(name="t4")
    Node.objects.create(name="t4-1", gpu_class=t4, gpu_count=4, time_slice_replicas=4)
    Node.objects.create(name="l4-1", gpu_class=GpuClass.objects.get(name="l4"), gpu_count=16)
    # vision's T4 quota is one replica, and victor holds it.
    Quota.objects.filter(team__name="vision", gpu_class=t4).update(nominal="0.25")
    JobFactory(
        owner=get_user_model().objects.get(username="victor"),
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="interactive"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        state="running",
        gpu_class=t4,
        nodes=["t4-1"],
        capacity_kind="nominal",
        started_at=timezone.now(),
    )
    job = submit(mia, queue="interactive", capability="any-gpu", declared_gpu_memory_gb=4)

    page = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()
    response = logged_in(mia).get(f"/jobs/{job.pk}/alternatives")

    # The what-ifs are loaded after the page itself.
    assert f'hx-get="/jobs/{job.pk}/alternatives" hx-trigger="load"' in page
    found = {(a.queue, a.capability, a.admitted_now) for a in response.context["alternatives"]}
    assert ("batch", "any-gpu", True) in found  # batch may run it on a free L4 at once
    assert "Would start sooner" in response.content.decode()


def test_a_waiting_job_shows_its_likely_start_its_interval_and_the_latest(mia):
    from datetime import UTC, datetime

    job = submit(mia)
    at = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)
    Job.objects.filter(pk=job.pk).update(
        estimated_start=at,
        likely_start=datetime(2026, 12, 3, 14, 10, tzinfo=UTC),
        start_range_low=datetime(2026, 12, 3, 13, 55, tzinfo=UTC),
        start_range_high=datetime(2026, 12, 3, 14, 40, tzinfo=UTC),
    )

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    text = " ".join(html[html.index("Estimated start:") :].split("</p>")[0].split())
    text = re.sub(r'<span class="estimate"[^>]*>(.*)</span>', r"\1", text)
    assert text == (
        'Estimated start: likely <time datetime="2026-12-03T14:10:00Z">2026-12-03 14:10 UTC</time>'
        ' (<time datetime="2026-12-03T13:55:00Z">2026-12-03 13:55 UTC</time> – '
        '<time datetime="2026-12-03T14:40:00Z">2026-12-03 14:40 UTC</time>), at the latest '
        '<time datetime="2026-12-03T15:30:00Z">2026-12-03 15:30 UTC</time>'
    )


def test_someone_in_no_team_is_told_so_instead_of_an_empty_form(ada, outsider):
    for user in (ada, outsider):
        response = logged_in(user).get("/jobs/new")

        html = response.content.decode()
        assert response.templates[0].name == "jobs/no_team.html"
        assert "you are in none, so there is nothing to submit to" in html
        assert 'id="job-form"' not in html


def test_the_logs_part_says_the_cluster_does_not_answer_and_why(
    sim_cluster, example_policy, settings, mia
):
    settings.CLUSTER_MODE = "sim"
    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)
    running = submit(mia)
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING, k8s_job_name="gpuportal-job-1")
    sim_cluster.fail_requests(count=10, status=500, message="etcd is down")

    page = logged_in(mia).get(f"/jobs/{running.pk}/logs").content.decode()

    assert "Logs unavailable: the cluster does not answer, try again later." in page
    assert "etcd is down" in page  # the cause, in small print that wraps on a phone


def test_a_stopping_job_says_when_its_pods_are_gone(mia):
    from django.utils import timezone

    from queues.models import EventKind, JobEvent

    job = submit(mia)
    stopped = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED, terminating=True)
    JobEvent.objects.create(job=job, at=stopped, kind=EventKind.CANCELLED, message="cancelled")
    grace = job.queue.termination_grace

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    until = (stopped + grace).isoformat()
    assert (
        '<span class="terminating" data-testid="stopping">· stopping: its pods are ending' in html
    )
    assert f'gone by <time datetime="{until}"' in html
    assert "its GPUs are held until then" in html


def test_a_job_no_reconcile_has_planned_yet_says_its_estimate_is_being_computed(mia):
    # Right after submitting, the page said "Estimated start: unknown" beside a preview that had
    # just given a time: nothing had planned it yet.
    job = submit(mia)

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    assert (
        '<span data-testid="estimate-pending">being computed: the next reconcile, within seconds, '
        "places it in the queue</span>" in html
    )
    assert "Estimated start: unknown" not in html


def test_a_projected_estimate_says_it_is_the_rougher_one(mia):
    # Deep in a long queue the forecast projects a job's start instead of simulating it
    # (queues/admission/projection.py); the page says so beside the time.
    from django.utils import timezone

    from queues.admission.plan import PROJECTED_NOTE

    job = submit(mia)
    at = timezone.now().replace(microsecond=0) + timedelta(days=3)
    Job.objects.filter(pk=job.pk).update(estimated_start=at, estimated_start_note=PROJECTED_NOTE)

    html = logged_in(mia).get(f"/jobs/{job.pk}/").content.decode()

    assert f'data-at="{at.isoformat()}"' in html
    assert f'<span class="hint" data-testid="estimate-note">({PROJECTED_NOTE})</span>' in html
