"""The jobs REST API: the same rules as the pages, over HTTP with personal and job tokens."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape
from rest_framework.test import APIClient

from portal.tokens import job_token
from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, Job, JobEvent, JobState, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

BODY = {
    "team": "vision",
    "queue": "batch",
    "capability_class": "any-gpu",
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
}


def body(**fields):
    return {**BODY, **fields}


def job(owner, *, team="vision", queue="batch", capability="any-gpu", **fields):
    return JobFactory(
        owner=owner,
        team=Team.objects.get(name=team),
        queue=Queue.objects.get(name=queue),
        capability_class=CapabilityClass.objects.get(name=capability),
        **fields,
    )


def ids(response) -> list[int]:
    return [j["id"] for j in response.json()["results"]]


@pytest.fixture
def noah(example_policy):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="noah")  # mia's teammate in nlp


@pytest.fixture
def victor(example_policy):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="victor")  # mia's teammate in vision


# --- Submit ----------------------------------------------------------------------------------


def test_a_member_submits_a_job_and_gets_it_back_stored_with_its_event(mia, api_as):
    response = api_as(mia).post(
        "/api/jobs/",
        body(
            pods=2,
            gpus_per_pod=4,
            runtime_limit="6h",
            args=["--epochs", "3"],
            env={"WANDB_MODE": "offline"},
            name="resnet",
        ),
        format="json",
    )

    assert response.status_code == 201
    job = Job.objects.get()
    data = response.json()
    assert data["id"] == job.pk
    assert (data["owner"], data["team"], data["queue"], data["capability_class"]) == (
        "mia",
        "vision",
        "batch",
        "any-gpu",
    )
    assert (data["state"], data["runtime_limit"], data["checkpoint_interval"]) == (
        "pending",
        "6h",
        "30m",
    )
    assert (data["command"], data["args"], data["env"]) == (
        ["python", "train.py"],
        ["--epochs", "3"],
        {"WANDB_MODE": "offline"},
    )
    assert (job.pods, job.gpus_per_pod, job.runtime_limit, job.name) == (
        2,
        4,
        timedelta(hours=6),
        "resnet",
    )
    assert [e.kind for e in job.events.all()] == ["submitted"]


def test_a_runtime_may_be_given_in_seconds(mia, api_as):
    response = api_as(mia).post("/api/jobs/", body(runtime_limit=5400), format="json")

    assert response.status_code == 201
    assert response.json()["runtime_limit"] == "1h30m"


def test_the_queues_defaults_apply_to_what_is_left_out(mia, api_as):
    response = api_as(mia).post("/api/jobs/", body(), format="json")

    assert response.status_code == 201
    assert (response.json()["runtime_limit"], response.json()["priority"]) == ("12h", 5)


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        pytest.param(
            {"runtime_limit": "4d"},
            {"runtime_limit": ["4d is over queue batch's maximum of 3d"]},
            id="runtime over the queue's maximum",
        ),
        pytest.param(
            {"pods": 3, "gpus_per_pod": 4},
            {
                "gpus_per_pod": [
                    "3 pod(s) × 4 = 12 GPU-equivalents is over queue batch's maximum of 8 per job"
                ]
            },
            id="more GPUs than the per-job maximum",
        ),
        pytest.param(
            {"queue": "training"},
            {
                "capability_class": [
                    "queue training does not allow capability class any-gpu "
                    "(allowed: bf16-large, fp8, multi-node-rdma)"
                ]
            },
            id="a capability class the queue does not allow",
        ),
        pytest.param(
            {"queue": "inference", "capability_class": "inference-16gb"},
            {"queue": ["team vision may not submit to queue inference"]},
            id="a team that may not use the queue",
        ),
        pytest.param(
            {"team": "speech"},
            {"team": ["you are not a member of team speech"]},
            id="a team the caller is not in",
        ),
        pytest.param(
            {"priority": 11},
            {"priority": ["must be from 0 to 10 in queue batch"]},
            id="a priority over the queue's bounds",
        ),
        pytest.param(
            {"priority": -1},
            {"priority": ["must be from 0 to 10 in queue batch"]},
            id="a priority under the queue's bounds",
        ),
        pytest.param(
            {"queue": "interactive"},
            {
                "declared_gpu_memory_gb": [
                    "time-sliced GPUs share their memory: declare how much your job uses"
                ]
            },
            id="a time-sliced job without declared GPU memory",
        ),
        pytest.param(
            {"pods": 0, "gpus_per_pod": 0},
            {"pods": ["must be at least 1"], "gpus_per_pod": ["must be at least 1"]},
            id="no pods and no GPUs",
        ),
        pytest.param({"image": "  "}, {"image": ["required"]}, id="a blank image"),
        pytest.param(
            {"team": "speech", "runtime_limit": "4d", "priority": 11},
            {
                "team": ["you are not a member of team speech"],
                "runtime_limit": ["4d is over queue batch's maximum of 3d"],
                "priority": ["must be from 0 to 10 in queue batch"],
            },
            id="every refused field at once",
        ),
    ],
)
def test_a_submission_that_breaks_the_queues_terms_is_refused_naming_the_field(
    mia, api_as, fields, errors
):
    response = api_as(mia).post("/api/jobs/", body(**fields), format="json")

    assert response.status_code == 400
    assert response.json() == errors
    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0


def test_a_mig_profile_on_a_queue_that_does_not_hand_out_slices_is_refused(mia, api_as):
    Queue.objects.get(name="batch").allowed_capability_classes.add(
        CapabilityClass.objects.get(name="mig-1g.10gb")
    )

    response = api_as(mia).post("/api/jobs/", body(capability_class="mig-1g.10gb"), format="json")

    assert response.status_code == 400
    assert response.json() == {
        "capability_class": [
            "mig-1g.10gb asks for a MIG slice, but queue batch hands out exclusive GPUs"
        ]
    }
    assert Job.objects.count() == 0


def test_a_pod_no_node_could_hold_is_refused_naming_the_field(mia, api_as):
    from queues.models import GpuClass
    from tests.factories import NodeFactory

    NodeFactory(gpu_class=GpuClass.objects.get(name="t4"), cpu_millicores=62_000, memory_mib=1)

    response = api_as(mia).post(
        "/api/jobs/",
        body(queue="interactive", declared_gpu_memory_gb=8, cpu_millicores_per_pod=64_000),
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "cpu_millicores_per_pod": [
            "64 CPU cores per pod is more than any node of queue interactive can give a pod "
            "(the largest has 62 CPU cores allocatable)"
        ],
        "memory_mib_per_pod": [
            "4,096 MiB per pod is more than any node of queue interactive can give a pod "
            "(the largest has 1 MiB allocatable)"
        ],
    }
    assert Job.objects.count() == 0


def test_unknown_names_are_refused_naming_each_field(mia, api_as):
    response = api_as(mia).post(
        "/api/jobs/",
        body(team="nope", queue="nope-q", capability_class="nope-c"),
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "team": ["no team named nope"],
        "queue": ["no queue named nope-q"],
        "capability_class": ["no capability class named nope-c"],
    }
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        pytest.param(
            {"command": "python train.py"},
            {"command": ["a list of strings, never a shell string"]},
            id="a shell string for a command",
        ),
        pytest.param(
            {"env": {"1BAD": "x", "GPUPORTAL_JOB_TOKEN": "forged"}},
            {
                "env": [
                    "'1BAD' is not a valid variable name (letters, digits, '_', '-', '.'; "
                    "not starting with a digit)",
                    "GPUPORTAL_JOB_TOKEN is reserved: the portal sets GPUPORTAL_…",
                ]
            },
            id="bad and reserved environment variable names",
        ),
        pytest.param(
            {"runtime_limit": "four hours"},
            {"runtime_limit": ["'four hours' is not a duration like '4h', '30m' or '1h30m'"]},
            id="a malformed duration",
        ),
        pytest.param(
            {"checkpoint_interval": 0},
            {"checkpoint_interval": ["must be longer than 0s"]},
            id="a zero checkpoint interval",
        ),
        pytest.param(
            {"image": None},
            {"image": ["This field may not be null."]},
            id="no image",
        ),
    ],
)
def test_a_malformed_body_is_refused_naming_the_field(mia, api_as, fields, errors):
    response = api_as(mia).post("/api/jobs/", body(**fields), format="json")

    assert response.status_code == 400
    assert response.json() == errors
    assert Job.objects.count() == 0


# --- List ------------------------------------------------------------------------------------


def test_a_member_lists_her_own_and_her_teams_jobs_newest_first(mia, noah, sara, api_as):
    now = timezone.now()
    own = job(mia, submitted_at=now - timedelta(minutes=3))
    teammates = job(noah, team="nlp", submitted_at=now - timedelta(minutes=1))
    job(sara, team="search", submitted_at=now)

    response = api_as(mia).get("/api/jobs/")

    assert response.status_code == 200
    assert ids(response) == [teammates.pk, own.pk]
    assert response.json()["count"] == 2


def test_someone_in_no_team_sees_no_jobs(mia, outsider, api_as):
    job(mia)

    assert api_as(outsider).get("/api/jobs/").json()["count"] == 0


def test_an_admin_sees_every_job(mia, sara, ada, api_as):
    jobs = [job(mia), job(sara, team="search")]

    assert sorted(ids(api_as(ada).get("/api/jobs/"))) == sorted(j.pk for j in jobs)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=running", ["running"]),
        ("queue=interactive", ["interactive"]),
        ("team=nlp", ["nlp"]),
        ("owner=me", ["mine"]),
        ("state=running&team=nlp", []),
        ("queue=no-such-queue", []),
    ],
)
def test_the_list_filters_by_state_queue_team_and_owner(mia, noah, victor, api_as, query, expected):
    job(mia, name="mine")
    job(noah, team="nlp", name="nlp")
    job(victor, queue="interactive", name="interactive")
    job(victor, state=JobState.RUNNING, name="running")

    response = api_as(mia).get(f"/api/jobs/?{query}")

    assert response.status_code == 200
    assert [j["name"] for j in response.json()["results"]] == expected


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        (
            "state=sleeping",
            {"state": ["Select a valid choice. sleeping is not one of the available choices."]},
        ),
        ("team=", {"team": ["must not be empty (leave the parameter out instead)"]}),
        ("queue=Not_A_Name", {"queue": ["not a name (lowercase letters, digits, '.' and '-')"]}),
        ("page_size=0", {"page_size": ["must be a whole number from 1 to 500"]}),
        (
            # a near miss of ``state``: listing every job would read as "these are pending"
            "status=pending",
            {
                "status": [
                    "not a parameter of this list "
                    "(it takes format, owner, page, page_size, queue, state, team)"
                ]
            },
        ),
    ],
)
def test_a_malformed_filter_is_refused_naming_it(mia, api_as, query, errors):
    response = api_as(mia).get(f"/api/jobs/?{query}")

    assert response.status_code == 400
    assert response.json() == errors


def test_every_parameter_the_list_takes_is_accepted_together(mia, api_as):
    mine = job(mia)

    response = api_as(mia).get(
        "/api/jobs/?state=pending&queue=batch&team=vision&owner=me&page=1&page_size=5&format=json"
    )

    assert response.status_code == 200
    assert [j["id"] for j in response.json()["results"]] == [mine.pk]


def test_the_list_is_paginated(mia, api_as):
    jobs = [job(mia, submitted_at=timezone.now() - timedelta(minutes=i)) for i in range(3)]

    first = api_as(mia).get("/api/jobs/?page_size=2").json()
    second = api_as(mia).get("/api/jobs/?page_size=2&page=2").json()

    assert first["count"] == 3
    assert [j["id"] for j in first["results"]] == [jobs[0].pk, jobs[1].pk]
    assert first["next"].endswith("/api/jobs/?page=2&page_size=2")
    assert [j["id"] for j in second["results"]] == [jobs[2].pk]
    assert api_as(mia).get("/api/jobs/?page=3").status_code == 404


def test_listing_costs_the_same_queries_for_many_jobs_as_for_one(
    mia, noah, api_as, django_assert_max_num_queries
):
    client = api_as(mia)
    job(mia)
    with django_assert_max_num_queries(4) as few:
        assert client.get("/api/jobs/").json()["count"] == 1
    for i in range(30):
        job(noah if i % 2 else mia, team="nlp" if i % 2 else "vision", state=JobState.RUNNING)

    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get("/api/jobs/").json()["count"] == 31


# --- Detail, and 404 for other teams ---------------------------------------------------------


def test_a_job_shows_why_it_waits_its_estimated_start_and_position(mia, api_as):
    reason = {
        "code": "QuotaExceeded",
        "message": "team vision uses 4 of 4 a100-80gb",
        "details": {"used": 4, "limit": 4},
        "hint": "your team's quota frees up when job 812 ends",
    }
    now = timezone.now()
    start = now + timedelta(hours=2)
    waiting = job(
        mia,
        pending_reasons=[reason],
        estimated_start=start,
        likely_start=now + timedelta(minutes=70),
        start_range_low=now + timedelta(minutes=50),
        start_range_high=now + timedelta(minutes=95),
        position=3,
        queue_length=7,
    )

    data = api_as(mia).get(f"/api/jobs/{waiting.pk}/").json()

    def stamp(value):
        return value.isoformat().replace("+00:00", "Z")

    assert data["pending_reasons"] == [reason]
    assert (data["position"], data["queue_length"]) == (3, 7)
    assert data["estimated_start"] == stamp(start)
    assert data["likely_start"] == stamp(now + timedelta(minutes=70))
    assert (data["start_range_low"], data["start_range_high"]) == (
        stamp(now + timedelta(minutes=50)),
        stamp(now + timedelta(minutes=95)),
    )
    assert data["estimated_start_note"] == ""
    assert (data["state"], data["terminating"], data["gpu_class"], data["nodes"]) == (
        "pending",
        False,
        None,
        [],
    )
    assert (data["rollbacks"], data["not_before"]) == (0, None)


def test_a_job_held_back_after_roll_backs_says_until_when(mia, api_as):
    until = timezone.now() + timedelta(minutes=2)
    held = job(mia, rollbacks=2, not_before=until)

    data = api_as(mia).get(f"/api/jobs/{held.pk}/").json()

    assert (data["rollbacks"], data["not_before"]) == (2, until.isoformat().replace("+00:00", "Z"))


def test_a_finished_job_shows_where_it_ran_and_how_it_ended(mia, api_as):
    from queues.models import GpuClass

    failed = job(
        mia,
        state=JobState.FAILED,
        gpu_class=GpuClass.objects.get(name="a100-80gb"),
        nodes=["a100-1", "a100-1"],
        k8s_job_name="gpuportal-job-7",
        exit_code=137,
        failure_reason="OOMKilled",
        started_at=timezone.now() - timedelta(hours=1),
        finished_at=timezone.now(),
    )

    data = api_as(mia).get(f"/api/jobs/{failed.pk}/").json()

    assert (data["gpu_class"], data["nodes"], data["k8s_job_name"]) == (
        "a100-80gb",
        ["a100-1", "a100-1"],
        "gpuportal-job-7",
    )
    assert (data["exit_code"], data["failure_reason"]) == (137, "OOMKilled")
    assert data["started_at"] and data["finished_at"]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("get", ""), ("post", "cancel/"), ("get", "events/"), ("get", "logs/")],
)
def test_a_job_of_a_team_the_caller_is_not_in_is_not_found(sara, mia, api_as, method, suffix):
    other = job(sara, team="search", k8s_job_name="gpuportal-job-1")

    response = getattr(api_as(mia), method)(f"/api/jobs/{other.pk}/{suffix}")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}
    assert Job.objects.get(pk=other.pk).state == JobState.PENDING


@pytest.mark.parametrize("job_id", ["999999", "-1", "99999999999999999999999", "abc"])
def test_an_id_that_names_no_job_is_not_found(mia, api_as, job_id):
    assert api_as(mia).get(f"/api/jobs/{job_id}/").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/jobs/"),
        ("post", "/api/jobs/"),
        ("post", "/api/jobs/preview/"),
        ("post", "/api/jobs/batch/"),
        ("get", "/api/jobs/1/"),
        ("post", "/api/jobs/1/cancel/"),
        ("get", "/api/jobs/1/events/"),
        ("get", "/api/jobs/1/logs/"),
    ],
)
def test_anonymous_calls_are_unauthorized(api, example_policy, method, path):
    response = getattr(api, method)(path, {}, format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_a_job_token_is_no_key_to_other_endpoints(mia, api):
    mine = job(mia)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {job_token(mine.pk)}")

    assert api.get(f"/api/jobs/{mine.pk}/").status_code == 401
    assert api.post(f"/api/jobs/{mine.pk}/cancel/").status_code == 401


# --- Cancel ----------------------------------------------------------------------------------


def test_the_owner_cancels_her_job(mia, api_as):
    mine = job(mia)

    response = api_as(mia).post(f"/api/jobs/{mine.pk}/cancel/")

    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    mine.refresh_from_db()
    assert mine.state == JobState.CANCELLED
    assert [(e.kind, e.message) for e in mine.events.all()] == [("cancelled", "cancelled by mia")]


def test_an_admin_cancels_anyones_job(mia, ada, api_as):
    mine = job(mia, state=JobState.RUNNING)

    response = api_as(ada).post(f"/api/jobs/{mine.pk}/cancel/")

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["terminating"]) == ("cancelled", True)


def test_a_teammate_sees_a_job_but_may_not_cancel_it(mia, victor, api_as):
    mine = job(mia)

    response = api_as(victor).post(f"/api/jobs/{mine.pk}/cancel/")

    assert response.status_code == 403
    assert response.json() == {"detail": "only the job's owner (mia) or an admin may cancel it"}
    assert Job.objects.get(pk=mine.pk).state == JobState.PENDING


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_a_finished_job_cannot_be_cancelled(mia, api_as, state):
    done = job(mia, state=state, finished_at=timezone.now())

    response = api_as(mia).post(f"/api/jobs/{done.pk}/cancel/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"job {done.pk} has already ended ({state}): nothing to cancel"
    }


# --- Events ----------------------------------------------------------------------------------


def test_the_timeline_lists_a_jobs_events_oldest_first(mia, api_as):
    response = api_as(mia).post("/api/jobs/", body(), format="json")
    job_id = response.json()["id"]
    later = timezone.now() + timedelta(minutes=5)
    JobEvent.objects.create(
        job_id=job_id, at=later, kind="admitted", message="on a100-1", details={"gpu": "a100"}
    )

    events = api_as(mia).get(f"/api/jobs/{job_id}/events/").json()

    assert events["count"] == 2
    assert [(e["kind"], e["message"]) for e in events["results"]] == [
        ("submitted", "submitted to queue batch"),
        ("admitted", "on a100-1"),
    ]
    assert events["results"][1]["details"] == {"gpu": "a100"}


# --- Logs (against the simulated cluster) ----------------------------------------------------


@pytest.fixture
def cluster(sim_cluster, example_policy, settings):
    settings.CLUSTER_MODE = "sim"
    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


def test_the_logs_show_the_last_lines_of_each_pod(sim_cluster, cluster, mia, api_as):
    client = api_as(mia)
    submitted = client.post(
        "/api/jobs/",
        body(pods=2, env={"SIM_DURATION_SECONDS": "600"}, command=["python", "train.py"]),
        format="json",
    ).json()
    reconcile_cycle(cluster=cluster, now=sim_cluster.now())
    sim_cluster.advance(120)

    response = client.get(f"/api/jobs/{submitted['id']}/logs/?tail=3")

    assert response.status_code == 200
    pods = response.json()["pods"]
    assert len(pods) == 2
    assert all(p["pod"].startswith(f"gpuportal-job-{submitted['id']}-") for p in pods)
    assert all(p["phase"] == "Running" and p["node"] for p in pods)
    assert all(len(p["lines"]) == 3 for p in pods)
    full = client.get(f"/api/jobs/{submitted['id']}/logs/").json()["pods"][0]["lines"]
    assert any("exec ['python', 'train.py']" in line for line in full)
    # the job page's part shows the same lines, one per line
    browser = Client()
    browser.force_login(mia)
    page = browser.get(f"/jobs/{submitted['id']}/logs").content.decode()
    assert "{{" not in page and "\n".join(escape(line) for line in full) in page


def test_a_job_that_never_reached_the_cluster_has_no_logs(mia, api_as, settings):
    settings.CLUSTER_KUBECONFIG = "/nonexistent/kubeconfig"
    waiting = job(mia)

    response = api_as(mia).get(f"/api/jobs/{waiting.pk}/logs/")

    assert response.status_code == 200
    assert response.json() == {"pods": []}


def test_the_logs_are_unavailable_while_the_cluster_does_not_answer(
    sim_cluster, cluster, mia, api_as
):
    running = job(mia, state=JobState.RUNNING, k8s_job_name="gpuportal-job-1")
    sim_cluster.fail_requests(count=10, status=500, message="etcd is down")

    response = api_as(mia).get(f"/api/jobs/{running.pk}/logs/")

    assert response.status_code == 503
    assert response.json()["detail"].startswith("the cluster does not answer, try again later")
    assert "etcd is down" in response.json()["detail"]


@pytest.mark.parametrize("tail", ["0", "1001", "ten"])
def test_a_tail_out_of_bounds_is_refused(mia, api_as, tail):
    waiting = job(mia)

    response = api_as(mia).get(f"/api/jobs/{waiting.pk}/logs/?tail={tail}")

    assert response.status_code == 400
    assert list(response.json()) == ["tail"]


# --- Preview ---------------------------------------------------------------------------------


def test_a_preview_on_an_idle_cluster_starts_now_and_stores_nothing(
    sim_cluster, cluster, mia, api_as
):
    reconcile_cycle(cluster=cluster, now=sim_cluster.now())

    response = api_as(mia).post(
        "/api/jobs/preview/", body(capability_class="min-40gb", gpus_per_pod=2), format="json"
    )

    assert response.status_code == 200
    data = response.json()
    assert data["starts_now"] is True
    assert (data["gpu_class"], data["capacity"]) == ("a100-80gb", "nominal")
    # 2 GPUs × weight 2.5 × 1.20 EUR
    assert (Decimal(data["cost_per_hour"]), data["currency"]) == (Decimal("6.00"), "EUR")
    assert (data["errors"], data["reasons"]) == ({}, [])
    assert Job.objects.count() == 0


def test_a_preview_of_a_request_that_breaks_the_queues_terms_is_refused(mia, api_as):
    response = api_as(mia).post("/api/jobs/preview/", body(runtime_limit="4d"), format="json")

    assert response.status_code == 400
    assert response.json() == {"runtime_limit": ["4d is over queue batch's maximum of 3d"]}


# --- Checkpoint with the job's own token -----------------------------------------------------


def with_job_token(job_id: int) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {job_token(job_id)}")
    return client


def test_a_running_job_reports_a_checkpoint_with_its_token(mia):
    running = job(mia, state=JobState.RUNNING, started_at=timezone.now() - timedelta(hours=1))

    response = with_job_token(running.pk).post(f"/api/jobs/{running.pk}/checkpoint/")

    assert response.status_code == 200
    running.refresh_from_db()
    assert running.last_checkpoint_at is not None
    assert response.json() == {
        "recorded": True,
        "at": running.last_checkpoint_at.isoformat().replace("+00:00", "Z"),
    }
    assert [e.kind for e in running.events.all()] == ["checkpoint"]


def test_a_job_token_is_refused_for_another_job(mia):
    mine = job(mia, state=JobState.RUNNING)
    other = job(mia, state=JobState.RUNNING)

    response = with_job_token(mine.pk).post(f"/api/jobs/{other.pk}/checkpoint/")

    assert response.status_code == 404
    assert Job.objects.get(pk=other.pk).last_checkpoint_at is None


def test_a_personal_token_is_refused_for_a_checkpoint(mia, api_as):
    running = job(mia, state=JobState.RUNNING)

    response = api_as(mia).post(f"/api/jobs/{running.pk}/checkpoint/")

    assert response.status_code == 401
    assert response.json() == {
        "detail": "a personal token is not accepted here: a job reports its checkpoints with "
        "its own token (Authorization: Bearer $GPUPORTAL_JOB_TOKEN)"
    }
    assert Job.objects.get(pk=running.pk).last_checkpoint_at is None


def test_a_session_is_refused_for_a_checkpoint(mia, api):
    running = job(mia, state=JobState.RUNNING)
    api.force_login(mia)

    response = api.post(f"/api/jobs/{running.pk}/checkpoint/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="job"'
    assert Job.objects.get(pk=running.pk).last_checkpoint_at is None


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer gpj_1_0000000000000000000000000000000000000000",
        "Bearer gpj_²_0000000000000000000000000000000000000000",
        "Bearer",
        "Basic eDp5",
    ],
)
def test_a_checkpoint_without_a_valid_job_token_is_unauthorized(mia, authorization):
    running = job(mia, state=JobState.RUNNING)
    client = APIClient()
    if authorization:
        client.credentials(HTTP_AUTHORIZATION=authorization)

    response = client.post(f"/api/jobs/{running.pk}/checkpoint/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="job"'


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.ADMITTED, JobState.SUCCEEDED])
def test_a_job_that_is_not_running_cannot_report_a_checkpoint(mia, state):
    idle = job(mia, state=state)

    response = with_job_token(idle.pk).post(f"/api/jobs/{idle.pk}/checkpoint/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"job {idle.pk} is {state}: only a running job reports checkpoints"
    }
    assert Job.objects.get(pk=idle.pk).last_checkpoint_at is None


def test_a_name_that_cannot_be_one_is_refused_without_asking_the_database(api_as, mia):
    response = api_as(mia).post(
        "/api/jobs/",
        {
            "team": "vis\x00ion",
            "queue": "batch",
            "capability_class": "any-gpu",
            "image": "x:1",
            "command": ["true"],
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["team"] == ["no team named vis\x00ion"]
