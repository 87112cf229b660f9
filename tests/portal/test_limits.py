"""Limits on abuse: login lock-out, API rates (429 with Retry-After), pending-job caps, and the
same limits holding on the shared caches (the database's, Redis)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from datetime import timedelta

import pytest
import redis
from django.core.cache import caches
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.throttling import SimpleRateThrottle

from portal.login_throttle import login_failure_record, login_locked_until
from portal.models import ApiToken
from portal.throttling import PortalUserRateThrottle
from queues.jobs.preview import job_preview
from queues.jobs.requests import JobRequest
from queues.models import CapabilityClass, Job, JobState, Queue, Team
from tests.queues.jobs.test_api import body, job

pytestmark = pytest.mark.django_db

LOCKED = b"Too many failed logins for this username: logging in is locked for 15 more minutes."


@pytest.fixture
def mia_with_password(mia):
    mia.set_password("pw-for-tests")
    mia.save(update_fields=["password"])
    return mia


def fail_logins(client: Client, username: str, times: int) -> list[int]:
    return [
        client.post("/login/", {"username": username, "password": "wrong"}).status_code
        for _ in range(times)
    ]


class TestLoginLockout:
    def test_five_wrong_passwords_lock_the_username_even_for_the_right_one(
        self, client, mia_with_password
    ):
        assert fail_logins(client, "mia", 4) == [200, 200, 200, 200]

        fifth = client.post("/login/", {"username": "mia", "password": "wrong"})
        right = client.post("/login/", {"username": "mia", "password": "pw-for-tests"})

        assert fifth.status_code == 429
        assert LOCKED in fifth.content
        assert right.status_code == 429
        assert right["Retry-After"] in {"899", "900"}
        assert LOCKED in right.content
        assert "_auth_user_id" not in client.session

    def test_the_lock_holds_for_another_client_and_on_the_admin_login(
        self, client, mia_with_password
    ):
        fail_logins(client, "MIA", 5)  # usernames are locked however they are capitalised

        other = Client()
        response = other.post("/login/", {"username": "mia", "password": "pw-for-tests"})
        admin = other.post("/admin/login/", {"username": "mia", "password": "pw-for-tests"})

        assert response.status_code == 429
        assert LOCKED in admin.content
        assert "_auth_user_id" not in other.session

    def test_a_success_before_the_limit_forgets_the_failures(self, client, mia_with_password):
        fail_logins(client, "mia", 4)
        assert (
            client.post("/login/", {"username": "mia", "password": "pw-for-tests"}).status_code
            == 302
        )
        client.logout()

        assert fail_logins(client, "mia", 4) == [200, 200, 200, 200]
        assert (
            client.post("/login/", {"username": "mia", "password": "pw-for-tests"}).status_code
            == 302
        )

    def test_the_lock_ends_after_the_lockout_time(self, client, mia_with_password):
        long_ago = timezone.now() - timedelta(minutes=16)
        for _ in range(5):
            login_failure_record("mia", now=long_ago)

        assert login_locked_until("mia") is None
        assert (
            client.post("/login/", {"username": "mia", "password": "pw-for-tests"}).status_code
            == 302
        )

    def test_failures_spread_over_more_than_the_window_do_not_add_up(self):
        start = timezone.now() - timedelta(minutes=20)
        for minutes in (0, 1, 2, 3):
            login_failure_record("mia", now=start + timedelta(minutes=minutes))
        login_failure_record("mia")  # 17 minutes after the first: a new window

        assert login_locked_until("mia") is None


@pytest.fixture
def rates(monkeypatch):
    """Set DRF's rates for this test (its throttles read them when the classes were made)."""

    def set_rates(**scopes: str) -> None:
        for scope, rate in scopes.items():
            monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, scope, rate)

    return set_rates


class TestApiRates:
    def test_over_the_user_rate_is_429_with_retry_after_in_json(
        self, api_as, mia, sara, rates, monkeypatch
    ):
        rates(user="3/min")
        # The clock stands 20 s into a minute (the window counts minutes of the clock).
        monkeypatch.setattr(PortalUserRateThrottle, "timer", lambda self: 1_800_000_020.0)
        client = api_as(mia)

        statuses = [client.get("/api/queues/").status_code for _ in range(4)]
        refused = client.get("/api/queues/")

        assert statuses == [200, 200, 200, 429]
        assert refused["Content-Type"] == "application/json"
        # Available again when this minute of the clock ends, 40 s later.
        assert refused["Retry-After"] == "40"
        assert refused.json() == {
            "detail": "Request was throttled. Expected available in 40 seconds."
        }
        # Counted per user: sara is not slowed by mia.
        assert api_as(sara).get("/api/queues/").status_code == 200

    def test_previews_have_their_own_lower_rate(self, api_as, mia, rates):
        rates(preview="2/min")
        client = api_as(mia)

        previews = [
            client.post("/api/jobs/preview/", body(), format="json").status_code for _ in range(3)
        ]

        assert previews == [200, 200, 429]
        assert client.get("/api/jobs/").status_code == 200


class TestPendingCaps:
    def test_a_submission_past_the_users_cap_is_refused_naming_the_limit(
        self, api_as, mia, settings
    ):
        settings.MAX_PENDING_JOBS_PER_USER = 2
        job(mia, state=JobState.PENDING)
        job(mia, state=JobState.RUNNING)  # only waiting jobs count
        client = api_as(mia)

        accepted = client.post("/api/jobs/", body(), format="json")
        refused = client.post("/api/jobs/", body(), format="json")

        assert accepted.status_code == 201
        assert refused.status_code == 400
        assert refused.json() == {
            "non_field_errors": [
                "mia would have 3 pending jobs: at most 2 may wait at once "
                "(MAX_PENDING_JOBS_PER_USER); cancel some or wait for them to start"
            ]
        }
        assert Job.objects.filter(owner=mia, state=JobState.PENDING).count() == 2

    def test_a_batch_past_the_cap_is_refused_whole_naming_the_first_job_over(
        self, api_as, mia, settings
    ):
        settings.MAX_PENDING_JOBS_PER_USER = 2
        response = api_as(mia).post(
            "/api/jobs/batch/", {"jobs": [body(), body(), body()]}, format="json"
        )

        assert response.status_code == 400
        assert response.json() == {
            "jobs": {
                "2": {
                    "non_field_errors": [
                        "mia would have 3 pending jobs: at most 2 may wait at once "
                        "(MAX_PENDING_JOBS_PER_USER); cancel some or wait for them to start"
                    ]
                }
            }
        }
        assert Job.objects.count() == 0

    def test_a_queue_past_its_cap_refuses_everyone_naming_the_queue(
        self, api_as, mia, sara, settings
    ):
        settings.MAX_PENDING_JOBS_PER_QUEUE = 1
        job(mia, state=JobState.PENDING)

        response = api_as(sara).post(
            "/api/jobs/", body(team="search", queue="batch"), format="json"
        )

        assert response.status_code == 400
        assert response.json() == {
            "queue": [
                "queue batch would hold 2 pending jobs: at most 1 may wait in one queue "
                "(MAX_PENDING_JOBS_PER_QUEUE)"
            ]
        }

    def test_the_preview_says_so_too(self, mia, settings):
        settings.MAX_PENDING_JOBS_PER_USER = 0

        assert preview_errors(mia) == {
            "non_field_errors": [
                "mia would have 1 pending jobs: at most 0 may wait at once "
                "(MAX_PENDING_JOBS_PER_USER); cancel some or wait for them to start"
            ]
        }


def preview_errors(user) -> dict:
    request = JobRequest(
        owner=user,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        image="registry.example/train:1",
        command=["python"],
    )
    return job_preview(request=request).errors


# --- The same limits on the caches that several workers share ------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def database_cache():
    config = {
        "default": {
            "BACKEND": "portal.cache.AtomicDatabaseCache",  # as in the settings
            "LOCATION": "portal_cache",
        }
    }
    with override_settings(CACHES=config):
        call_command("createcachetable", verbosity=0)
        yield caches["default"]


@pytest.fixture
def private_redis(tmp_path):
    """A Redis server of this test's own on a free port (never the shared one)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    url = f"redis://127.0.0.1:{port}/0"
    config = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},  # as in settings
        }
    }
    client.process = process
    with override_settings(CACHES=config):
        yield client
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=10)


def test_the_lockout_is_kept_in_the_database_cache_every_worker_reads(
    database_cache, client, mia_with_password
):
    fail_logins(client, "mia", 5)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM portal_cache WHERE cache_key LIKE %s", ["%login-failures:%"]
        )
        assert cursor.fetchone()[0] == 1
    assert (
        Client().post("/login/", {"username": "mia", "password": "pw-for-tests"}).status_code == 429
    )


def test_the_lockout_and_api_rates_are_kept_in_redis_when_configured(
    private_redis, client, mia_with_password, api_as, rates
):
    rates(user="2/min")
    fail_logins(client, "mia", 5)
    statuses = [api_as(mia_with_password).get("/api/queues/").status_code for _ in range(3)]

    keys = sorted(k.decode().split(":", 2)[-1].split(":")[0] for k in private_redis.keys("*"))
    assert keys == ["login-failures", "throttle_user_" + str(mia_with_password.pk)]
    assert statuses == [200, 200, 429]
    assert (
        Client().post("/login/", {"username": "mia", "password": "pw-for-tests"}).status_code == 429
    )


def test_with_redis_down_logins_and_the_api_go_on_uncounted(
    private_redis, client, mia_with_password, api_as, rates, caplog
):
    rates(user="2/min")
    private_redis.process.terminate()
    private_redis.process.wait(timeout=10)

    statuses = [api_as(mia_with_password).get("/api/queues/").status_code for _ in range(3)]
    login = client.post("/login/", {"username": "mia", "password": "pw-for-tests"})

    assert statuses == [200, 200, 200]
    assert login.status_code == 302
    assert "API rate not counted, the cache is unreachable" in caplog.text
    assert "login failures not read, the cache is unreachable" in caplog.text


class TestPagePreviews:
    def test_page_previews_and_api_previews_share_one_rate(self, client, api_as, mia, rates):
        rates(preview="2/min")
        client.force_login(mia)
        form = {**PAGE_FORM, "preview": "1"}

        first = client.post("/jobs/new", form, HTTP_HX_REQUEST="true")
        api = api_as(mia).post("/api/jobs/preview/", body(), format="json")
        third = client.post("/jobs/new", form, HTTP_HX_REQUEST="true")

        assert first.context["preview"] is not None and first.context.get("wait") is None
        assert api.status_code == 200
        assert third.context["wait"] is not None and third.context.get("preview") is None
        assert b'data-testid="preview-wait"' in third.content
        # When this minute of the clock ends (the rate counts in windows of the clock).
        assert re.search(
            rb"Too many previews in a short time \(each simulates the whole cluster\): "
            rb"try again in ([1-5]?\d|60) seconds?\.",
            third.content,
        )

    def test_a_job_pages_alternatives_wait_their_turn_too(self, client, mia, rates):
        rates(preview="1/min")
        pending = job(mia, state=JobState.PENDING)
        client.force_login(mia)

        first = client.get(f"/jobs/{pending.pk}/alternatives")
        second = client.get(f"/jobs/{pending.pk}/alternatives")

        assert first.templates[0].name == "jobs/_alternatives.html"
        assert second.templates[0].name == "jobs/_preview_wait.html"
        assert b'id="alternatives"' in second.content

    def test_a_copy_of_a_job_named_in_unicode_digits_is_no_copy_not_a_500(self, client, mia):
        client.force_login(mia)

        assert client.get("/jobs/new?from=³").status_code == 200


PAGE_FORM = {
    "team": "vision",
    "queue": "batch",
    "capability_class": "any-gpu",
    "pods": "1",
    "gpus_per_pod": "1",
    "cpu_millicores_per_pod": "1000",
    "memory_mib_per_pod": "4096",
    "runtime_limit": "1h",
    "image": "registry.example/train:1",
    "command": "python\ntrain.py",
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", ["database", "redis"])
def test_six_threads_at_once_get_exactly_the_rate_through(request, live_server, mia, rates, store):
    # 700 GETs from 6 threads once got 653 answers through a 600/min limit: DRF's count was read,
    # then written. Counted with one atomic increment, the rate holds exactly.
    import concurrent.futures

    import requests

    request.getfixturevalue("database_cache" if store == "database" else "private_redis")
    rates(user="40/hour")
    _, key = ApiToken.issue(user=mia, name="hammer")
    url = f"{live_server.url}/api/queues/"
    window = int(time.time() // 3600)

    def hammer(_: int) -> list[int]:
        with requests.Session() as session:
            session.headers["Authorization"] = f"Token {key}"
            return [session.get(url, timeout=30).status_code for _ in range(20)]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        statuses = [s for batch in pool.map(hammer, range(6)) for s in batch]

    assert statuses.count(200) + statuses.count(429) == 120
    if int(time.time() // 3600) == window:
        assert statuses.count(200) == 40
    else:  # an hour of the clock ended during the test: two windows' worth at most
        assert statuses.count(200) <= 80
