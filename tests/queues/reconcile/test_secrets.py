"""Jobs that reference Secrets, against the simulated cluster over HTTP with the official client:
a missing Secret or key keeps the pods waiting the way the kubelet says (and the job page says
so in plain words), the job starts once the Secret exists, or fails after the grace and gives
its GPUs back; a plain value the policy allowed reaches the pod and is masked once the job ends.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from kubernetes.client import ApiException

from portal.masking import MASK
from queues.cluster.adapter import Cluster
from queues.cluster.secrets import SecretKeyRef
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_cancel, job_submit
from queues.models import CapabilityClass, Job, JobState, Queue, Team
from queues.policy.apply import policy_apply
from queues.reconcile.cycle import reconcile_cycle

pytestmark = pytest.mark.django_db

NAMESPACE = "team-vision"


@pytest.fixture
def cluster(sim_cluster, example_policy):
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield adapter
    adapter.close()


@pytest.fixture
def cycle(sim_cluster, cluster):
    def run():
        return reconcile_cycle(cluster=cluster, now=sim_cluster.now())

    return run


def submit(owner, **fields) -> Job:
    env = {"SIM_DURATION_SECONDS": "600", **fields.pop("env", {})}
    return job_submit(
        request=JobRequest(
            owner=owner,
            team=Team.objects.get(name="vision"),
            queue=Queue.objects.get(name="batch"),
            capability_class=CapabilityClass.objects.get(name="any-gpu"),
            image="registry.example/train:1",
            command=["python", "train.py"],
            env=env,
            **fields,
        )
    )


def create_secret(sim, name: str, **data: str) -> None:
    sim.core().create_namespaced_secret(NAMESPACE, {"metadata": {"name": name}, "stringData": data})


def pod_of(sim, job: Job):
    (pod,) = (
        sim.core()
        .list_namespaced_pod(NAMESPACE, label_selector=f"gpuportal.io/job-id={job.pk}")
        .items
    )
    return pod


def test_a_missing_secret_is_shown_in_plain_words_and_the_job_starts_once_it_exists(
    sim_cluster, cycle, mia, settings
):
    settings.MISSING_SECRET_GRACE_SECONDS = 600
    job = submit(mia, env={"WANDB_API_KEY": SecretKeyRef("wandb", "api-key")})
    cycle()
    created = sim_cluster.batch().read_namespaced_job(f"gpuportal-job-{job.pk}", NAMESPACE)
    (var,) = [e for e in created.spec.template.spec.containers[0].env if e.name == "WANDB_API_KEY"]
    assert (var.value, var.value_from.secret_key_ref.name, var.value_from.secret_key_ref.key) == (
        None,
        "wandb",
        "api-key",
    )
    sim_cluster.advance(30)

    cycle()

    waiting = pod_of(sim_cluster, job).status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == (
        "CreateContainerConfigError",
        'secret "wandb" not found',
    )
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    (reason,) = job.pending_reasons
    deadline = (job.admitted_at + timedelta(seconds=600)).strftime("%Y-%m-%d %H:%M UTC")
    assert reason == {
        "code": "ContainerConfigError",
        "message": "admitted, but its pods cannot start: Secret wandb does not exist in "
        "namespace team-vision",
        "details": {
            "cluster_reason": "CreateContainerConfigError",
            "cluster_message": 'secret "wandb" not found',
            "namespace": "team-vision",
            "secret": "wandb",
            "key": "",
        },
        "hint": "create it: kubectl create secret generic wandb --from-literal=api-key=… "
        f"-n team-vision; the job starts once it is there, or fails at {deadline} and gives "
        "its GPUs back",
    }
    page = Client()
    page.force_login(mia)
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    assert "Secret wandb does not exist in namespace team-vision" in html
    assert "kubectl create secret generic wandb --from-literal=api-key=… -n team-vision" in html

    create_secret(sim_cluster, "wandb", other="x")  # the wrong key first
    sim_cluster.advance(10)
    cycle()

    job.refresh_from_db()
    assert job.pending_reasons[0]["message"] == (
        "admitted, but its pods cannot start: Secret wandb in namespace team-vision has no key "
        "api-key"
    )
    assert job.pending_reasons[0]["hint"].startswith(
        "add the key: kubectl patch secret wandb -n team-vision --type merge -p "
        '\'{"stringData": {"api-key": "…"}}\''
    )

    sim_cluster.core().delete_namespaced_secret("wandb", NAMESPACE)
    create_secret(sim_cluster, "wandb", **{"api-key": "abc123secret"})
    sim_cluster.advance(10)  # the kubelet's next try
    cycle()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.pending_reasons == []
    events = sim_cluster.core().list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.name={pod_of(sim_cluster, job).metadata.name}"
    )
    failed = [e for e in events.items if e.reason == "Failed"]
    assert [e.message for e in failed] == [
        'Error: secret "wandb" not found',
        "Error: couldn't find key api-key in Secret team-vision/wandb",
    ]


def test_a_secret_still_missing_after_the_grace_fails_the_job_and_gives_its_gpus_back(
    sim_cluster, cycle, mia, settings
):
    settings.MISSING_SECRET_GRACE_SECONDS = 300
    job = submit(mia, env_from=["hf-token"], gpus_per_pod=4)
    cycle()
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.pending_reasons[0]["hint"].startswith(
        "create it: kubectl create secret generic hf-token --from-literal=<key>=… -n team-vision"
    )
    sim_cluster.advance(300)

    report = cycle()

    job.refresh_from_db()
    assert report.transitions["admitted→failed"] == 1
    assert (job.state, job.terminating) == (JobState.FAILED, True)
    assert job.failure_reason == (
        "CreateContainerConfigError: Secret hf-token does not exist in namespace team-vision"
    )
    event = job.events.get(kind="failed")
    assert event.message == (
        "its pods could not start: Secret hf-token does not exist in namespace team-vision; "
        "gave its GPUs back after waiting 5 minutes"
    )
    sim_cluster.advance(60)
    cycle()
    cycle()

    job.refresh_from_db()
    assert job.terminating is False
    with pytest.raises(ApiException) as gone:
        sim_cluster.batch().read_namespaced_job(f"gpuportal-job-{job.pk}", NAMESPACE)
    assert gone.value.status == 404
    assert sim_cluster.core().list_namespaced_pod(NAMESPACE).items == []


def test_an_allowed_plain_value_reaches_the_pod_and_is_masked_once_the_job_ends(
    sim_cluster, cycle, mia
):
    policy_apply(text="submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH]\n")
    job = submit(mia, env={"HF_TOKEN_PATH": "/secrets/hf"})
    assert job.holds_secret_values
    cycle()

    created = sim_cluster.batch().read_namespaced_job(f"gpuportal-job-{job.pk}", NAMESPACE)
    env = {e.name: e.value for e in created.spec.template.spec.containers[0].env}
    assert env["HF_TOKEN_PATH"] == "/secrets/hf"
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert (job.state, job.env["HF_TOKEN_PATH"]) == (JobState.RUNNING, "/secrets/hf")
    sim_cluster.advance(600)

    cycle()

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert (job.env, job.holds_secret_values) == (
        {"SIM_DURATION_SECONDS": "600", "HF_TOKEN_PATH": MASK},
        False,
    )


def test_a_cancelled_waiting_jobs_allowed_value_is_masked_by_the_next_cycle(cycle, mia):
    policy_apply(text="submissions:\n  plain_env_names_allowed: [HF_TOKEN_PATH]\n")
    job = submit(mia, env={"HF_TOKEN_PATH": "/secrets/hf"})
    job_cancel(job=job, by=mia)

    cycle()

    job.refresh_from_db()
    assert (job.state, job.env["HF_TOKEN_PATH"], job.holds_secret_values) == (
        JobState.CANCELLED,
        MASK,
        False,
    )
