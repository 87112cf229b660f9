"""Secrets by reference, never stored: a job names a Kubernetes Secret's key (the API's
``{"secret", "key"}``, the form's ``NAME=secret:<secret>/<key>``) or a whole Secret
(``env_from``); a plain value of a secret-looking name is refused unless the policy allows the
name; and no page or answer ever shows such a value, the API masking exactly what the page
masks."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.masking import MASK
from queues.models import CapabilityClass, Job, JobState, Queue, Team
from queues.policy.apply import policy_apply
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

BODY = {
    "team": "nlp",
    "queue": "batch",
    "capability_class": "any-gpu",
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
}
FORM = {
    "team": "nlp",
    "queue": "batch",
    "capability_class": "any-gpu",
    "pods": "1",
    "gpus_per_pod": "1",
    "cpu_millicores_per_pod": "4",
    "memory_mib_per_pod": "32 GiB",
    "image": "registry.example/train:1",
    "command": "python\ntrain.py",
}
REFERENCE = {"secret": "wandb", "key": "api-key"}


def body(**fields):
    return {**BODY, **fields}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def stored_job(owner, **fields) -> Job:
    """A job of team nlp as a submission before this release may have stored it."""
    return JobFactory(
        owner=owner,
        team=Team.objects.get(name="nlp"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        **fields,
    )


def allow_plain(*names: str) -> None:
    policy_apply(text=f"submissions:\n  plain_env_names_allowed: [{', '.join(names)}]\n")


def env_lines(page: str) -> list[str]:
    """The job page's environment, one line per variable, as a person reads it."""
    cell = re.search(r'<dd data-testid="env">(.*?)</dd>', page, re.S)
    assert cell is not None
    return [re.sub(r"<[^>]+>", "", line).strip() for line in cell[1].split("<br>")]


@pytest.fixture
def noah(example_policy):
    return get_user_model().objects.get(username="noah")  # mia's teammate in nlp


# --- The API answers no secret value -----------------------------------------------------------


def test_a_teammates_token_reads_no_secret_value_that_the_job_page_hides(mia, noah, api_as):
    job = stored_job(mia, env={"WANDB_API_KEY": "abc123secret", "WANDB_MODE": "offline"})

    one = api_as(noah).get(f"/api/jobs/{job.pk}/")
    listed = api_as(noah).get("/api/jobs/")
    page = logged_in(noah).get(f"/jobs/{job.pk}/").content.decode()

    assert one.status_code == 200
    assert one.json()["env"] == {"WANDB_API_KEY": MASK, "WANDB_MODE": "offline"}
    assert listed.json()["results"][0]["env"] == {"WANDB_API_KEY": MASK, "WANDB_MODE": "offline"}
    assert env_lines(page) == [f"WANDB_API_KEY={MASK}", "WANDB_MODE=offline"]
    for answer in (one.content.decode(), listed.content.decode(), page):
        assert "abc123secret" not in answer


def test_the_owner_does_not_read_it_either(mia, api_as):
    job = stored_job(mia, env={"DB_PASSWORD": "hunter2"})

    assert api_as(mia).get(f"/api/jobs/{job.pk}/").json()["env"] == {"DB_PASSWORD": MASK}


def test_the_django_admin_shows_the_environment_as_the_job_page_does(mia, ada):
    job = stored_job(mia, env={"WANDB_API_KEY": "abc123secret", "HF_HOME": "/data/hf"})
    ada.is_superuser = True
    ada.save(update_fields=["is_superuser"])

    page = logged_in(ada).get(f"/admin/queues/job/{job.pk}/change/").content.decode()

    assert f"WANDB_API_KEY={MASK}" in page and "HF_HOME=/data/hf" in page
    assert "abc123secret" not in page


# --- Submitting a reference through the API ----------------------------------------------------


def test_a_member_submits_a_secret_reference_and_a_whole_secret(mia, noah, api_as):
    response = api_as(mia).post(
        "/api/jobs/",
        body(env={"WANDB_API_KEY": REFERENCE, "WANDB_MODE": "offline"}, env_from=["hf-token"]),
        format="json",
    )

    assert response.status_code == 201
    job = Job.objects.get()
    assert job.env == {"WANDB_API_KEY": REFERENCE, "WANDB_MODE": "offline"}
    assert job.env_from == ["hf-token"]
    assert job.holds_secret_values is False
    data = api_as(noah).get(f"/api/jobs/{job.pk}/").json()
    assert (data["env"], data["env_from"]) == (
        {"WANDB_API_KEY": REFERENCE, "WANDB_MODE": "offline"},
        ["hf-token"],
    )
    page = logged_in(noah).get(f"/jobs/{job.pk}/").content.decode()
    assert env_lines(page) == [
        "WANDB_API_KEY from key api-key of Secret wandb",
        "WANDB_MODE=offline",
        "every key of Secret hf-token as a variable",
    ]


def test_a_batch_and_a_preview_take_references_too(mia, api_as):
    client = api_as(mia)
    batch = client.post(
        "/api/jobs/batch/",
        {"jobs": [body(env={"WANDB_API_KEY": REFERENCE}), body(env_from=["wandb"])]},
        format="json",
    )
    preview = client.post("/api/jobs/preview/", body(env={"HF_TOKEN": REFERENCE}), format="json")

    assert batch.status_code == 201
    assert [j.env_from for j in Job.objects.order_by("pk")] == [[], ["wandb"]]
    assert preview.status_code == 200


NAME_RULE = (
    "is not a valid Secret name: lowercase letters, digits, '-' and '.', starting and ending "
    "with a letter or digit, at most 253 characters"
)
KEY_RULE = (
    "is not a valid key of a Secret: letters, digits, '-', '_' and '.', at most 253 characters"
)


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        pytest.param(
            {"env": {"WANDB_API_KEY": {"secret": "Wandb", "key": "api-key"}}},
            {"env": [f"env.WANDB_API_KEY.secret: 'Wandb' {NAME_RULE}"]},
            id="an upper-case Secret name",
        ),
        pytest.param(
            {"env": {"WANDB_API_KEY": {"secret": "wandb-", "key": "api/key"}}},
            {
                "env": [
                    f"env.WANDB_API_KEY.secret: 'wandb-' {NAME_RULE}",
                    f"env.WANDB_API_KEY.key: 'api/key' {KEY_RULE}",
                ]
            },
            id="a name ending in a dash and a key with a slash",
        ),
        pytest.param(
            {"env": {"TOKEN": {"secret": "a" * 254, "key": ".."}}},
            {
                "env": [
                    f"env.TOKEN.secret: '{'a' * 40}…' {NAME_RULE}",
                    "env.TOKEN.key: '..' is not a valid key of a Secret: not '.' or '..' or "
                    "starting '..'",
                ]
            },
            id="too long a name and a key of two dots",
        ),
        pytest.param(
            {"env": {"WANDB_API_KEY": {"secret": "wandb"}}},
            {"env": ["env.WANDB_API_KEY.key: required"]},
            id="a reference without its key",
        ),
        pytest.param(
            {"env": {"WANDB_API_KEY": {"secret": "wandb", "key": "k", "optional": True}}},
            {"env": ["env.WANDB_API_KEY.optional: unknown (a reference has secret and key)"]},
            id="a reference with a field it does not take",
        ),
        pytest.param(
            {"env": {"WANDB_API_KEY": {"secret": 7, "key": "api-key"}}},
            {"env": ["env.WANDB_API_KEY.secret: must be text"]},
            id="a Secret's name that is not text",
        ),
        pytest.param(
            {"env": {"SEED": ["7"]}},
            {
                "env": [
                    'env.SEED: must be text, or a key of a Secret: {"secret": "<secret>", "key": "<key>"}'
                ]
            },
            id="a list for a value",
        ),
        pytest.param(
            {"env": "WANDB_MODE=offline"},
            {
                "env": [
                    'an object of variable name → text, or a key of a Secret: {"secret": "<secret>", "key": "<key>"}'
                ]
            },
            id="a string for the environment",
        ),
        pytest.param(
            {"env_from": ["wandb", "Hf_Token", "wandb"]},
            {"env_from": ["Secret wandb is named 2 times", f"'Hf_Token' {NAME_RULE}"]},
            id="a bad and a repeated Secret in env_from",
        ),
        pytest.param(
            {"env_from": "wandb"},
            {"env_from": ["a list of Secret names"]},
            id="one Secret's name for env_from",
        ),
    ],
)
def test_a_bad_reference_is_refused_naming_the_field_and_nothing_is_stored(
    mia, api_as, fields, errors
):
    response = api_as(mia).post("/api/jobs/", body(**fields), format="json")

    assert response.status_code == 400
    assert response.json() == errors
    assert Job.objects.count() == 0


# --- Plain values of secret-looking names ------------------------------------------------------


def test_a_plain_secret_looking_value_is_refused_with_how_to_reference_a_secret(mia, api_as):
    response = api_as(mia).post(
        "/api/jobs/", body(env={"WANDB_API_KEY": "abc123secret"}), format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "env": [
            "env.WANDB_API_KEY: the name looks secret, and the portal keeps no secret values: "
            "put the value in a Kubernetes Secret in namespace team-nlp (kubectl create secret "
            "generic <secret> --from-literal=<key>=… -n team-nlp) and reference it as "
            '"WANDB_API_KEY": {"secret": "<secret>", "key": "<key>"}; an admin may allow plain '
            "values for WANDB_API_KEY in the policy"
        ]
    }
    assert Job.objects.count() == 0


def test_a_name_the_policy_allows_carries_a_plain_value_that_is_still_never_shown(
    mia, noah, api_as
):
    allow_plain("HF_TOKEN_PATH")

    response = api_as(mia).post(
        "/api/jobs/", body(env={"HF_TOKEN_PATH": "/secrets/hf"}), format="json"
    )
    refused = api_as(mia).post("/api/jobs/", body(env={"HF_TOKEN": "hf_abc"}), format="json")

    assert response.status_code == 201
    job = Job.objects.get()
    assert (job.env, job.holds_secret_values) == ({"HF_TOKEN_PATH": "/secrets/hf"}, True)
    assert response.json()["env"] == {"HF_TOKEN_PATH": MASK}
    assert api_as(noah).get(f"/api/jobs/{job.pk}/").json()["env"] == {"HF_TOKEN_PATH": MASK}
    assert refused.status_code == 400
    assert refused.json()["env"][0].startswith("env.HF_TOKEN: the name looks secret")


def test_the_mask_is_never_taken_for_a_value(mia, api_as):
    allow_plain("HF_TOKEN_PATH")

    response = api_as(mia).post(
        "/api/jobs/", body(env={"HF_TOKEN_PATH": MASK, "DB_PASSWORD": MASK}), format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "env": [
            f"env.HF_TOKEN_PATH: {MASK} is how the portal hides a secret value, not the value: "
            "reference a Kubernetes Secret instead or type the value again "
            '("HF_TOKEN_PATH": {"secret": "<secret>", "key": "<key>"})',
            f"env.DB_PASSWORD: {MASK} is how the portal hides a secret value, not the value: "
            'reference a Kubernetes Secret instead ("DB_PASSWORD": {"secret": "<secret>", '
            '"key": "<key>"})',
        ]
    }
    assert Job.objects.count() == 0


# --- The form --------------------------------------------------------------------------------


def test_the_form_takes_a_reference_and_whole_secrets(mia):
    response = logged_in(mia).post(
        "/jobs/new",
        {
            **FORM,
            "env": "WANDB_API_KEY=secret:wandb/api-key\nWANDB_MODE=offline",
            "env_from": "hf-token\nwandb",
        },
        follow=True,
    )

    job = Job.objects.get()
    assert response.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert job.env == {"WANDB_API_KEY": REFERENCE, "WANDB_MODE": "offline"}
    assert job.env_from == ["hf-token", "wandb"]


@pytest.mark.parametrize(
    ("env", "env_from", "field", "errors"),
    [
        pytest.param(
            "WANDB_API_KEY=secret:Wandb/api-key",
            "",
            "env",
            [f"env.WANDB_API_KEY.secret: 'Wandb' {NAME_RULE}"],
            id="the API's message for a bad Secret name",
        ),
        pytest.param(
            "",
            "wandb\nHf_Token",
            "env_from",
            [f"'Hf_Token' {NAME_RULE}"],
            id="a bad Secret in env_from",
        ),
        pytest.param(
            "WANDB_API_KEY=secret:wandb",
            "",
            "env",
            [
                "line 1: write WANDB_API_KEY=secret:<secret>/<key>, e.g. "
                "WANDB_API_KEY=secret:wandb/api-key (a plain value starting with secret: is "
                "written \\secret:…)"
            ],
            id="a reference without a key",
        ),
        pytest.param(
            "WANDB_API_KEY=abc123secret",
            "",
            "env",
            [
                "env.WANDB_API_KEY: the name looks secret, and the portal keeps no secret "
                "values: put the value in a Kubernetes Secret in namespace team-nlp (kubectl "
                "create secret generic <secret> --from-literal=<key>=… -n team-nlp) and "
                "reference it as WANDB_API_KEY=secret:<secret>/<key>; an admin may allow plain "
                "values for WANDB_API_KEY in the policy"
            ],
            id="a plain secret-looking value, in the form's syntax",
        ),
    ],
)
def test_the_form_refuses_what_the_api_refuses_under_the_field(mia, env, env_from, field, errors):
    response = logged_in(mia).post("/jobs/new", {**FORM, "env": env, "env_from": env_from})

    assert response.status_code == 200
    assert response.context["form"].errors[field] == errors
    assert "abc123secret" not in response.content.decode().split('id="id_env"')[0]
    assert Job.objects.count() == 0


def test_the_same_request_round_trips_between_the_api_and_the_form(mia, api_as):
    env = {
        "WANDB_API_KEY": REFERENCE,
        "MODE": "secret:not-a-reference",  # a plain value that starts like one
        "LR": "3e-4",
    }
    api_as(mia).post("/api/jobs/", body(env=env, env_from=["hf-token"]), format="json")
    first = Job.objects.get()

    form = logged_in(mia).get(f"/jobs/new?from={first.pk}").context["form"]
    text = form["env"].value()
    logged_in(mia).post("/jobs/new", {**FORM, "env": text, "env_from": form["env_from"].value()})

    assert text == ("LR=3e-4\nMODE=\\secret:not-a-reference\nWANDB_API_KEY=secret:wandb/api-key")
    second = Job.objects.exclude(pk=first.pk).get()
    assert (second.env, second.env_from) == (first.env, ["hf-token"])


# --- Resubmitting a copy -------------------------------------------------------------------


def test_a_copy_never_carries_a_hidden_value_and_says_so(mia):
    job = stored_job(
        mia, env={"WANDB_API_KEY": "abc123secret", "WANDB_MODE": "offline"}, state="succeeded"
    )
    client = logged_in(mia)

    page = client.get(f"/jobs/new?from={job.pk}")
    html = page.content.decode()

    assert page.context["form"]["env"].value() == f"WANDB_API_KEY={MASK}\nWANDB_MODE=offline"
    assert "abc123secret" not in html
    assert (
        "The copy does not carry the value of WANDB_API_KEY: the portal never shows secret "
        "values. Reference a Kubernetes Secret instead (NAME=secret:&lt;secret&gt;/&lt;key&gt;)."
    ) in html

    submitted = client.post("/jobs/new", {**FORM, "env": page.context["form"]["env"].value()})

    assert submitted.context["form"].errors["env"] == [
        f"env.WANDB_API_KEY: {MASK} is how the portal hides a secret value, not the value: "
        "reference a Kubernetes Secret instead (WANDB_API_KEY=secret:<secret>/<key>)"
    ]
    assert Job.objects.count() == 1


def test_an_active_jobs_allowed_value_stays_out_of_the_copy_and_its_page(mia):
    allow_plain("HF_TOKEN_PATH")
    client = logged_in(mia)
    client.post("/jobs/new", {**FORM, "env": "HF_TOKEN_PATH=/secrets/hf"})
    job = Job.objects.get()
    assert job.state == JobState.PENDING and job.env == {"HF_TOKEN_PATH": "/secrets/hf"}

    for url in (f"/jobs/{job.pk}/", f"/jobs/new?from={job.pk}", "/jobs/"):
        assert "/secrets/hf" not in client.get(url).content.decode()
