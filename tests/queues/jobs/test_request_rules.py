"""One table of bad requests, run through the HTML form and the REST API: both refuse each one
with the same message under the same field, and store nothing (the rules live in one place,
queues/jobs/requests.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from queues.jobs.requests import IMAGE_REFERENCE, REQUEST_FIELDS
from queues.jobs.serializers import JobSubmitSerializer
from queues.models import Job

pytestmark = pytest.mark.django_db

GOOD = {
    "team": "vision",
    "queue": "batch",
    "capability_class": "any-gpu",
    "pods": 1,
    "gpus_per_pod": 1,
    "cpu_millicores_per_pod": 4000,
    "memory_mib_per_pod": 8192,
    "runtime_limit": "2h",
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
    "args": ["--epochs", "3"],
    "env": {"WANDB_MODE": "offline"},
}
INT_MAX = 2_147_483_647

# (id, the fields that differ from GOOD, as the API takes them; the expected errors)
BAD_REQUESTS = [
    ("no pods", {"pods": 0}, {"pods": ["must be at least 1"]}),
    ("negative GPUs", {"gpus_per_pod": -3}, {"gpus_per_pod": ["must be at least 1"]}),
    ("a word for pods", {"pods": "two"}, {"pods": ["must be a whole number"]}),
    # int() reads these as 1 and 2; a reviewer does not see digits.
    ("pods in fullwidth digits", {"pods": "１"}, {"pods": ["must be a whole number"]}),
    (
        "GPUs in Arabic-Indic digits",
        {"gpus_per_pod": "٢"},
        {"gpus_per_pod": ["must be a whole number"]},
    ),
    (
        "a command with a right-to-left override",
        {"command": ["python", "train\u202e.py"]},
        {"command": ["item 2: must not contain control or invisible formatting characters"]},
    ),
    (
        "an environment value with a right-to-left override",
        {"env": {"WANDB_MODE": "off\u202eline"}},
        {
            "env": [
                "WANDB_MODE: a value must not contain control or invisible formatting characters"
            ]
        },
    ),
    (
        "an argument with a zero-width space",
        {"args": ["--epochs", "3\u200b0"]},
        {"args": ["item 2: must not contain control or invisible formatting characters"]},
    ),
    (
        "CPU beyond a 32-bit column",
        {"cpu_millicores_per_pod": 2**40},
        {"cpu_millicores_per_pod": ["must be at most 2,147,483,647"]},
    ),
    (
        "memory beyond a 32-bit column",
        {"memory_mib_per_pod": INT_MAX + 1},
        {"memory_mib_per_pod": ["must be at most 2,147,483,647"]},
    ),
    # 10**24 was refused; from 10**25 on, Decimal arithmetic ran before the check (a 500).
    ("pods past any number", {"pods": 10**25}, {"pods": ["must be at most 2,147,483,647"]}),
    (
        "GPUs per pod past any number",
        {"gpus_per_pod": 10**30},
        {"gpus_per_pod": ["must be at most 2,147,483,647"]},
    ),
    (
        "no GPU memory declared",
        {"declared_gpu_memory_gb": 0},
        {"declared_gpu_memory_gb": ["must be at least 1"]},
    ),
    (
        "a priority no column holds",
        {"priority": 10**12},
        {"priority": ["must be from -2147483647 to 2147483647"]},
    ),
    (
        "priority above the queue's",
        {"priority": 11},
        {"priority": ["must be from 0 to 10 in queue batch"]},
    ),
    ("a zero runtime", {"runtime_limit": "0s"}, {"runtime_limit": ["must be longer than 0s"]}),
    (
        "an endless runtime",
        {"runtime_limit": "20000d"},
        {"runtime_limit": ["must be at most 10000d"]},
    ),
    (
        "a runtime over the queue's",
        {"runtime_limit": "4d"},
        {"runtime_limit": ["4d is over queue batch's maximum of 3d"]},
    ),
    (
        "a runtime in Arabic-Indic digits",
        {"runtime_limit": "١h"},
        {"runtime_limit": ["'١h' is not a duration like '4h', '30m' or '1h30m'"]},
    ),
    (
        "a checkpoint interval no duration holds",
        {"checkpoint_interval": "99999999999d"},
        {"checkpoint_interval": ["99999999999d is too long a duration"]},
    ),
    ("no image", {"image": ""}, {"image": ["required"]}),
    (
        "a shell command for an image",
        {"image": "$(id)"},
        {
            "image": [
                "$(id) is not an image reference like registry.example.com/team/train:1.4 "
                "(lowercase path, optional :tag and @sha256:digest)"
            ]
        },
    ),
    (
        "an image over two lines",
        {"image": "ubuntu\n:latest"},
        {"image": ["must not contain control or invisible formatting characters"]},
    ),
    (
        "a huge image name",
        {"image": "a" * 501},
        {"image": ["at most 500 characters (this has 501)"]},
    ),
    (
        "a name that reads backwards",
        {"name": "\u202egnp.exe"},
        {"name": ["must not contain control or invisible formatting characters"]},
    ),
    ("a long name", {"name": "n" * 101}, {"name": ["at most 100 characters (this has 101)"]}),
    (
        "a reserved variable",
        {"env": {"GPUPORTAL_JOB_TOKEN": "x"}},
        {"env": ["GPUPORTAL_JOB_TOKEN is reserved: the portal sets GPUPORTAL_…"]},
    ),
    (
        "a variable starting with a digit",
        {"env": {"1BAD": "x"}},
        {
            "env": [
                "'1BAD' is not a valid variable name (letters, digits, '_', '-', '.'; "
                "not starting with a digit)"
            ]
        },
    ),
    (
        "a 10,000-character variable name",
        {"env": {"A" * 10_000: "x"}},
        {"env": [f"'{'A' * 40}…': a name has at most 256 characters"]},
    ),
    (
        "a NUL in a variable's value",
        {"env": {"FOO": "a\x00b"}},
        {"env": ["FOO: a value must not contain a NUL character"]},
    ),
    (
        "a NUL in the command",
        {"command": ["python", "a\x00b"]},
        {"command": ["item 2: must not contain a NUL character"]},
    ),
    (
        "a command of 257 items",
        {"command": [f"a{i}" for i in range(257)]},
        {"command": ["at most 256 items (this has 257)"]},
    ),
    (
        "an argument of 5,000 characters",
        {"args": ["x" * 5000]},
        {"args": ["item 1: at most 4096 characters"]},
    ),
    (
        "a team of which mia is not a member",
        {"team": "speech"},
        {"team": ["you are not a member of team speech"]},
    ),
    ("no such team", {"team": "nope"}, {"team": ["no team named nope"]}),
    (
        "a queue the team may not use",
        {"queue": "inference", "capability_class": "inference-16gb"},
        {"queue": ["team vision may not submit to queue inference"]},
    ),
    (
        "a MIG slice in an exclusive queue",
        {"capability_class": "mig-1g.10gb"},
        {
            "capability_class": [
                "queue batch does not allow capability class mig-1g.10gb "
                "(allowed: any-gpu, bf16-large, fp8, inference-16gb, min-40gb)",
                "mig-1g.10gb asks for a MIG slice, but queue batch hands out exclusive GPUs",
            ]
        },
    ),
    (
        "more GPUs than the queue gives one job",
        {"pods": 2, "gpus_per_pod": 8},
        {
            "gpus_per_pod": [
                "2 pod(s) × 8 = 16 GPU-equivalents is over queue batch's maximum of 8 per job"
            ]
        },
    ),
    (
        "more GPUs than the team may ever hold on any class",
        {"queue": "training", "capability_class": "bf16-large", "pods": 4, "gpus_per_pod": 8},
        {
            "gpus_per_pod": [
                "can never start: a100-80gb: needs 32; team vision may hold at most 8 "
                "(nominal 4 + borrowing 4); h100-80gb: needs 32; team vision may hold at most "
                "16 (nominal 8 + borrowing 8): ask for at most 16 GPU-equivalents (h100-80gb), "
                "or ask an admin for more quota"
            ]
        },
    ),
    (
        "a time-sliced GPU without declared memory",
        {"queue": "interactive", "runtime_limit": "1h"},
        {
            "declared_gpu_memory_gb": [
                "time-sliced GPUs share their memory: declare how much your job uses"
            ]
        },
    ),
]


def as_form(fields: dict) -> dict[str, str]:
    """The same request as a person types it into the submit form."""
    form = {}
    for name, value in fields.items():
        if isinstance(value, list):
            form[name] = "\n".join(value)
        elif isinstance(value, dict):
            form[name] = "\n".join(f"{k}={v}" for k, v in value.items())
        else:
            form[name] = str(value)
    return form


@pytest.mark.parametrize(
    ("fields", "errors"), [(f, e) for _, f, e in BAD_REQUESTS], ids=[i for i, _, _ in BAD_REQUESTS]
)
def test_the_form_and_the_api_refuse_alike_and_store_nothing(mia, api_as, fields, errors):
    body = {**GOOD, **fields}

    api = api_as(mia).post("/api/jobs/", body, format="json")
    client = Client()
    client.force_login(mia)
    page = client.post("/jobs/new", as_form(body))

    assert api.status_code == 400
    assert api.json() == errors
    assert page.status_code == 200
    assert page.context["form"].errors == errors
    assert Job.objects.count() == 0


def test_the_good_request_is_accepted_by_both(mia, api_as):
    api = api_as(mia).post("/api/jobs/", GOOD, format="json")
    client = Client()
    client.force_login(mia)
    page = client.post("/jobs/new", as_form(GOOD))

    assert api.status_code == 201, api.json()
    assert page.status_code == 302
    assert Job.objects.count() == 2


def test_the_form_and_the_api_take_exactly_the_request_fields(mia):
    from queues.jobs.forms import JobForm

    assert set(JobForm(user=mia).fields) == set(REQUEST_FIELDS)
    assert set(JobSubmitSerializer().fields) == set(REQUEST_FIELDS)


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "busybox:1.36",
        "registry.example.com/team/train:1.4",
        "localhost:5000/x/y_z__w:v-1.2",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "ghcr.io/acme/train@sha256:" + "a" * 64,
    ],
)
def test_an_image_reference_follows_the_oci_grammar(image):
    assert IMAGE_REFERENCE.fullmatch(image)


@pytest.mark.parametrize(
    "image", ["Ubuntu:1", "a b", "x:", "x:-tag", "x//y", "x@sha256:abc", "-x", "x:" + "t" * 129]
)
def test_an_image_reference_outside_the_grammar_is_refused(image):
    assert not IMAGE_REFERENCE.fullmatch(image)


@pytest.mark.parametrize("field", ["pods", "gpus_per_pod"])
@pytest.mark.parametrize("size", [10**24, 10**25, 10**40])
def test_sizes_past_any_number_are_400_on_submit_preview_and_batch(mia, api_as, field, size):
    api = api_as(mia)
    body = {**GOOD, field: size}
    expected = {field: ["must be at most 2,147,483,647"]}

    submitted = api.post("/api/jobs/", body, format="json")
    previewed = api.post("/api/jobs/preview/", body, format="json")
    batch = api.post("/api/jobs/batch/", {"jobs": [GOOD, body]}, format="json")
    client = Client()
    client.force_login(mia)
    page = client.post("/jobs/new", {**as_form(body), "preview": "1"})

    assert (submitted.status_code, submitted.json()) == (400, expected)
    assert (previewed.status_code, previewed.json()) == (400, expected)
    assert (batch.status_code, batch.json()) == (400, {"jobs": {"1": expected}})
    assert page.status_code == 200
    assert page.context["form"].errors == expected
    assert Job.objects.count() == 0


def test_a_capability_class_no_node_offers_is_refused_under_capability_class(
    sara, api_as, example_policy
):
    # It was refused under gpus_per_pod, citing a quota of 0 ("may hold at most 0").
    from queues.models import GpuClass, Node

    t4 = GpuClass.objects.get(name="t4")
    Node.objects.create(name="t4-01", gpu_class=t4, product=t4.product, gpu_count=4)
    request = {
        **GOOD,
        "team": "search",
        "queue": "inference",
        "capability_class": "inference-16gb",
        "runtime_limit": "1h",
    }

    api = api_as(sara).post("/api/jobs/", request, format="json")
    client = Client()
    client.force_login(sara)
    page = client.post("/jobs/new", as_form(request))

    expected = {
        "capability_class": [
            "capability class inference-16gb needs l4 here (queue inference allows l4); no l4 "
            "node exists in the cluster: choose a capability class that matches a GPU the "
            "cluster has"
        ]
    }
    assert (api.status_code, api.json()) == (400, expected)
    assert page.context["form"].errors == expected
    assert Job.objects.count() == 0


def test_a_pods_default_size_is_one_for_the_api_the_form_and_the_request():
    """The form pre-fills what the API assumes when a field is left out (the tester saw 4 cores
    and 32 GiB on the form against 1 core and 4 GiB through the API)."""
    from queues.admission.pods import DEFAULT_POD_CPU_MILLICORES, DEFAULT_POD_MEMORY_MIB
    from queues.jobs.forms import JobForm
    from queues.jobs.requests import JobRequest

    fields = JobSubmitSerializer().fields
    form = JobForm.base_fields
    import dataclasses

    request_fields = {f.name: f.default for f in dataclasses.fields(JobRequest)}
    assert (
        fields["cpu_millicores_per_pod"].default,
        form["cpu_millicores_per_pod"].initial,
        request_fields["cpu_millicores_per_pod"],
    ) == (DEFAULT_POD_CPU_MILLICORES,) * 3
    assert (
        fields["memory_mib_per_pod"].default,
        form["memory_mib_per_pod"].initial,
        request_fields["memory_mib_per_pod"],
    ) == (DEFAULT_POD_MEMORY_MIB,) * 3
