"""Secrets by reference as a member meets them, in headless Chromium: the submit page takes a
reference, the job page says in plain words that the Secret is missing and how to create it,
and follows the job to running once it exists.

The world moves only when the test runs a reconcile cycle; the page must follow on its own
(htmx polling)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from queues.cluster.adapter import Cluster
from queues.models import Job, JobState
from queues.reconcile.cycle import reconcile_cycle

pytestmark = pytest.mark.browser

LIVE = 10_000  # ms: the job page polls every 3 s
ONE_A100 = {
    "simulation": {"default_duration_seconds": 1800, "image_pull_seconds": 0},
    "node_groups": [
        {
            "name": "a100",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "4",
            },
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "4"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "nodes": [{"name": "a100-1"}],
        }
    ],
}


@pytest.fixture
def sim(sim_cluster_factory, example_policy, settings) -> Iterator:
    sim = sim_cluster_factory(nodes=ONE_A100)
    settings.CLUSTER_KUBECONFIG = str(sim.kubeconfig)  # the page reads the pods' logs
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))

    def cycle() -> None:
        reconcile_cycle(cluster=adapter, now=sim.now())

    sim.cycle = cycle
    yield sim
    adapter.close()


def test_a_missing_secret_is_explained_on_the_job_page_until_it_exists(
    sim, logged_in_page: Page, screenshot
):
    page = logged_in_page
    page.goto("/jobs/new")
    page.select_option("#id_team", "nlp")
    page.select_option("#id_queue", "batch")
    page.select_option("#id_capability_class", "any-gpu")
    page.fill("#id_image", "registry.example/train:1")
    page.fill("#id_command", "python\ntrain.py")
    page.fill("#id_env", "WANDB_API_KEY=abc123secret")
    expect(page.locator("#field-env")).to_contain_text("NAME=secret:<secret>/<key>")
    page.get_by_role("button", name="Submit", exact=True).click()

    expect(page.locator("#field-env .error")).to_contain_text(
        "env.WANDB_API_KEY: the name looks secret, and the portal keeps no secret values"
    )
    expect(page.locator("#field-env .error")).to_contain_text(
        "reference it as WANDB_API_KEY=secret:<secret>/<key>"
    )
    assert Job.objects.count() == 0
    screenshot("plain secret refused")

    page.fill("#id_env", "WANDB_API_KEY=secret:wandb/api-key\nSIM_DURATION_SECONDS=600")
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get()
    expect(page.get_by_test_id("env")).to_contain_text(
        "WANDB_API_KEY from key api-key of Secret wandb"
    )
    sim.cycle()
    sim.advance(5)
    sim.cycle()

    reason = page.locator(".reason[data-code=ContainerConfigError]")
    expect(reason).to_contain_text(
        "admitted, but its pods cannot start: Secret wandb does not exist in namespace team-nlp",
        timeout=LIVE,
    )
    expect(reason.locator(".hint")).to_contain_text(
        "create it: kubectl create secret generic wandb --from-literal=api-key=… -n team-nlp; "
        "the job starts once it is there"
    )
    expect(page.get_by_test_id("state")).to_have_text("admitted")
    screenshot("waiting for the secret")

    sim.core().create_namespaced_secret(
        "team-nlp", {"metadata": {"name": "wandb"}, "stringData": {"api-key": "abc123secret"}}
    )
    sim.advance(10)
    sim.cycle()

    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    expect(page.get_by_test_id("state")).to_have_text("running", timeout=LIVE)
    expect(page.locator(".reason")).to_have_count(0)
    assert "abc123secret" not in page.content()
    screenshot("running")
