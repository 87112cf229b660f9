"""Production settings pass Django's deploy checks; the headers every answer carries; every
/api/ answer is JSON in the documented shape ({"detail": …} or field → messages), errors too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from portal.models import ApiToken
from queues.jobs.apis import JobViewSet
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db

# What an operator sets in production (docs/configuration.md); everything else is the default.
PRODUCTION = {
    "SECRET_KEY": "x" * 20 + "production-like-secret-key-of-fifty-chars",
    "ALLOWED_HOSTS": "gpus.example.org",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    passed = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SECURE_", "SESSION_", "DEBUG", "SECRET_KEY", "CACHE_URL"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**passed, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_settings_pass_check_deploy_at_warning_level(tmp_path):
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", PORTAL_VAR_DIR=str(tmp_path), **PRODUCTION
    )

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_turning_https_off_is_what_fails_the_deploy_check(tmp_path):
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        PORTAL_VAR_DIR=str(tmp_path),
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="0",
        **PRODUCTION,
    )

    assert result.returncode != 0
    assert "security.W004" in result.stderr  # HSTS
    assert "security.W008" in result.stderr  # SSL redirect


def test_behind_the_proxy_plain_http_is_redirected_and_https_gets_hsts(tmp_path):
    script = (
        "import django; django.setup(); from django.test import Client; "
        "c = Client(HTTP_HOST='gpus.example.org'); "
        "plain = c.get('/login/'); "
        "tls = c.get('/login/', HTTP_X_FORWARDED_PROTO='https'); "
        "health = c.get('/healthz'); "
        "print(plain.status_code, plain['Location'], tls.status_code, "
        "tls['Strict-Transport-Security'], health.status_code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SECURE_")},
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PORTAL_VAR_DIR": str(tmp_path),
            **PRODUCTION,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )

    # /healthz answers over plain HTTP: load balancers probe it from inside.
    assert result.stdout.split() == [
        "301",
        "https://gpus.example.org/login/",
        "200",
        "max-age=31536000;",
        "includeSubDomains;",
        "preload",
        "200",
    ], result.stderr


class TestHeaders:
    def test_pages_carry_a_content_security_policy_without_inline_scripts(self, client):
        policy = client.get("/login/")["Content-Security-Policy"]

        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == "'self'"
        assert directives["object-src"] == "'none'"
        assert directives["frame-ancestors"] == "'none'"

    def test_the_page_showing_a_new_token_is_not_stored_by_any_cache(self, client, mia):
        client.force_login(mia)

        response = client.post("/tokens/", {"name": "laptop"})

        assert response.status_code == 200
        assert ApiToken.objects.filter(user=mia, name="laptop").count() == 1
        assert "no-store" in response["Cache-Control"]


def api_client(user) -> Client:
    _, key = ApiToken.issue(user=user, name="errors")
    return Client(HTTP_AUTHORIZATION=f"Token {key}")


class TestApiErrorsAreJson:
    def test_an_unknown_api_url_is_a_json_404(self, mia):
        response = api_client(mia).get("/api/no-such-thing/")

        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"detail": "Not found."}

    def test_a_method_an_endpoint_does_not_take_is_a_json_405(self, mia):
        response = api_client(mia).delete("/api/queues/")

        assert response.status_code == 405
        assert response.json() == {"detail": 'Method "DELETE" not allowed.'}

    def test_a_body_over_the_upload_limit_is_a_json_413_before_it_is_read(self, mia, settings):
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

        payload = json.dumps({"name": "x" * 2000})

        response = api_client(mia).post("/api/jobs/", payload, content_type="application/json")

        assert response.status_code == 413
        assert len(payload) == 2012
        assert response.json() == {
            "detail": "the request body is 2,012 bytes; at most 1,000 are accepted"
        }

    def test_too_many_parameters_is_a_json_400(self, mia, settings):
        settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10

        response = api_client(mia).get("/api/jobs/?" + "&".join(f"f{n}=1" for n in range(20)))

        assert response.status_code == 400
        assert response["Content-Type"] == "application/json"
        assert response.json() == {
            "detail": "Bad request: The number of GET/POST parameters exceeded "
            "settings.DATA_UPLOAD_MAX_NUMBER_FIELDS."
        }

    def test_a_crash_is_a_json_500_and_a_page_elsewhere(self, mia, monkeypatch):
        # The one way to make the portal crash on purpose: a view that raises.
        def crash(self, request, *args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(JobViewSet, "list", crash)
        client = api_client(mia)
        client.raise_request_exception = False

        response = client.get("/api/jobs/")

        assert response.status_code == 500
        assert response.json() == {"detail": "Internal server error."}

    def test_outside_the_api_a_404_is_still_the_html_page(self, client):
        response = client.get("/no-such-page/")

        assert response.status_code == 404
        assert response["Content-Type"].startswith("text/html")


class TestSchema:
    def test_schema_generation_has_no_warnings_or_errors(self):
        GENERATOR_STATS.reset()
        SchemaGenerator().get_schema(request=None, public=True)

        assert (GENERATOR_STATS._warn_cache, GENERATOR_STATS._error_cache) == ({}, {})

    def test_the_schema_and_docs_need_credentials_like_every_api_endpoint(self, client, mia):
        assert client.get("/api/schema/").status_code == 401
        assert client.get("/api/docs/").status_code == 401

        client.force_login(mia)
        assert client.get("/api/schema/").status_code == 200
        assert client.get("/api/docs/").status_code == 200

    def test_capacity_kind_empty_is_in_the_schema(self):
        schema = SchemaGenerator().get_schema(request=None, public=True)
        job = schema["components"]["schemas"]["Job"]["properties"]["capacity_kind"]

        refs = [option["$ref"].rsplit("/", 1)[-1] for option in job["oneOf"]]
        assert [schema["components"]["schemas"][r]["enum"] for r in refs] == [
            ["nominal", "borrowed", "reserved"],
            [""],
        ]
