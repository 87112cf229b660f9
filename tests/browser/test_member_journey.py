"""A member's day in the browser: log in, browse the queues, preview and submit a job that has to
wait, watch it start by itself when capacity frees, cancel a job and resubmit a copy.

The world moves only when a test says so: the simulated cluster has a manual clock, and the test
runs the reconcile cycles a Celery worker would. The job page must follow on its own (htmx
polling), so nothing here reloads it after a reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Dialog, Page, expect

from queues.cluster.adapter import Cluster
from queues.jobs.requests import JobRequest
from queues.jobs.services import job_submit
from queues.models import CapabilityClass, Job, JobState, Queue, Team
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.facts import CycleReport
from tests.sim import SimClusterHandle

pytestmark = pytest.mark.browser

LIVE = 10_000  # ms: htmx polls every 3 s, so a reconcile shows within one or two polls
UTC_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")  # what templates/_time.html writes
# One node of 4 A100s: one 4-GPU job fills it within its team's nominal quota, so a second
# waits for capacity (InsufficientCapacity), not for quota.
A100_NODE = {
    "simulation": {"default_duration_seconds": 1800, "image_pull_seconds": 0},
    "node_groups": [
        {
            "name": "a100",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "4",
                "network.gpuportal.io/domain": "ib-a",
                "topology.kubernetes.io/rack": "rack-1",
            },
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "4"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "nodes": [{"name": "a100-1"}],
        }
    ],
}


def submit(owner, *, team="vision", queue="batch", capability="min-40gb", gpus=1, seconds=600):
    """A job submitted through the service, as the API does (not through the browser)."""
    return job_submit(
        request=JobRequest(
            owner=owner,
            team=Team.objects.get(name=team),
            queue=Queue.objects.get(name=queue),
            capability_class=CapabilityClass.objects.get(name=capability),
            image="registry.example/train:1",
            command=["python", "train.py"],
            args=["--epochs", "3"],
            env={"SIM_DURATION_SECONDS": str(seconds)},
            gpus_per_pod=gpus,
        )
    )


@pytest.fixture
def a100_cluster(
    sim_cluster_factory, example_policy
) -> Iterator[tuple[SimClusterHandle, Callable[[], CycleReport]]]:
    """The 4-A100 cluster, and ``cycle()``: one reconcile at the cluster's time, as the worker
    would run it."""
    sim = sim_cluster_factory(nodes=A100_NODE)
    adapter = Cluster.from_kubeconfig(str(sim.kubeconfig))

    def cycle() -> CycleReport:
        return reconcile_cycle(cluster=adapter, now=sim.now())

    yield sim, cycle
    adapter.close()


def test_a_member_logs_in_and_browses_the_queues_open_to_her_teams(
    page: Page, log_in, screenshot, demo_member
):
    page.goto("/jobs/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/jobs/$"))
    page.fill("#id_username", "mia")
    page.fill("#id_password", "not her password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    screenshot("login refused")

    log_in(demo_member)

    expect(page.locator(".who")).to_contain_text("mia")
    expect(page.locator(".lead .chip.mine")).to_have_text(["nlp", "vision"])
    cards = page.locator("article.card[id^=queue-]")
    expect(cards).to_have_count(4)
    for name in ("interactive", "interactive-mig", "batch", "training"):
        expect(page.locator(f"#queue-{name}")).to_be_visible()
    expect(page.locator("#queue-inference")).to_have_count(0)  # search and speech only
    batch = page.locator("#queue-batch")
    expect(batch).to_contain_text("preemptible: its pods get 30s to stop")
    expect(batch).to_contain_text("required every 30m")
    screenshot("catalog")

    batch.get_by_role("link", name="batch").click()

    expect(page).to_have_url(re.compile(r"/queues/batch/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Queue batch")
    expect(page.locator("#capability-min-40gb")).to_contain_text("a100-80gb")
    expect(page.locator("#capability-min-40gb")).to_contain_text("h100-80gb")
    screenshot("queue detail")


def test_a_waiting_job_shows_why_then_starts_by_itself_when_capacity_frees(
    a100_cluster, logged_in_page: Page, screenshot, demo_member
):
    sim, cycle = a100_cluster
    victor = get_user_model().objects.get(username="victor")
    first = submit(victor, gpus=4, seconds=600)
    cycle()
    sim.advance(30)
    cycle()
    first.refresh_from_db()
    assert (first.state, first.nodes) == (JobState.RUNNING, ["a100-1"])
    page = logged_in_page

    page.goto("/jobs/new")
    page.select_option("#id_team", "vision")
    page.select_option("#id_queue", "batch")
    page.select_option("#id_capability_class", "min-40gb")
    page.fill("#id_gpus_per_pod", "4")
    page.fill("#id_runtime_limit", "2h")
    page.fill("#id_image", "registry.example/train:2")
    page.fill("#id_command", "python\ntrain.py")
    page.fill("#id_args", "--epochs\n3")
    page.fill("#id_env", "SIM_DURATION_SECONDS=600")
    screenshot("form filled")
    page.get_by_role("button", name="Preview").click()

    verdict = page.get_by_test_id("preview-verdict")
    expect(verdict).to_contain_text("Would wait")
    expect(verdict).to_contain_text("on a100-80gb")
    binding = page.locator("#preview .reasons li").first
    expect(binding).to_have_attribute("data-code", "InsufficientCapacity")
    expect(binding).to_contain_text("needs 4 a100-80gb GPUs; 0 free")
    expect(page.locator("#preview")).to_contain_text("EUR per hour")
    assert Job.objects.count() == 1  # a preview stores nothing
    screenshot("preview would wait")

    page.get_by_role("button", name="Submit", exact=True).click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(owner=demo_member)
    expect(page.locator(".messages")).to_have_text(f"Job {job.pk} submitted to queue batch.")
    state = page.get_by_test_id("state")
    expect(state).to_have_text("pending")
    reasons = page.locator("#job-status .reasons li")
    expect(reasons).to_have_count(0)  # no reconcile has looked at it yet
    screenshot("submitted")

    cycle()  # the worker's next reconcile stores why the job waits

    expect(reasons.first).to_have_attribute("data-code", "InsufficientCapacity", timeout=LIVE)
    expect(reasons.first).to_contain_text("needs 4 a100-80gb GPUs; 0 free")
    expect(page.locator("#job-status")).to_contain_text("position 1 of 1 in queue batch")
    estimated_start = page.locator("#job-status time").first  # in the viewer's zone, UTC on hover
    expect(estimated_start).to_have_attribute("title", UTC_STAMP)
    expect(estimated_start).not_to_contain_text("UTC")
    screenshot("pending reason appeared")

    sim.advance(600)  # victor's job ends; its GPUs free up
    for _ in range(5):
        cycle()
        job.refresh_from_db()
        if job.state == JobState.RUNNING:
            break
        sim.advance(5)
    first.refresh_from_db()
    assert (first.state, job.state) == (JobState.SUCCEEDED, JobState.RUNNING)

    expect(state).to_have_text("running", timeout=LIVE)
    expect(reasons).to_have_count(0)
    status = page.locator("#job-status")
    expect(status).to_contain_text("a100-80gb (nominal)")
    expect(status).to_contain_text("a100-1")
    expect(status.locator(".timeline .kind")).to_have_text(
        ["submitted", "admitted", "started"], timeout=LIVE
    )
    screenshot("running")


def test_a_member_cancels_a_running_job_and_resubmits_a_copy(
    a100_cluster, logged_in_page: Page, screenshot, demo_member
):
    sim, cycle = a100_cluster
    job = submit(demo_member, gpus=2, seconds=3600)
    cycle()
    sim.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    page = logged_in_page
    dialogs: list[str] = []

    def confirm(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", confirm)

    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("state")).to_have_text("running")
    screenshot("running")
    page.get_by_role("button", name="Cancel job").click()

    expect(page.locator(".messages")).to_have_text(f"Job {job.pk} cancelled.")
    assert dialogs == [f"Cancel job {job.pk}?"]
    expect(page.get_by_test_id("state")).to_have_text("cancelled")
    terminating = page.locator("#job-status .terminating")
    expect(terminating).to_be_visible()  # its pods are still going
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    screenshot("cancelled terminating")

    for _ in range(5):
        cycle()
        job.refresh_from_db()
        if not job.terminating:
            break
        sim.advance(60)
    assert (job.state, job.terminating) == (JobState.CANCELLED, False)

    expect(terminating).to_have_count(0, timeout=LIVE)
    screenshot("cancelled pods gone")

    page.get_by_role("link", name="Resubmit a copy", exact=True).click()

    expect(page).to_have_url(re.compile(rf"/jobs/new\?from={job.pk}$"))
    expect(page.locator("#id_team")).to_have_value("vision")
    expect(page.locator("#id_queue")).to_have_value("batch")
    expect(page.locator("#id_capability_class")).to_have_value("min-40gb")
    expect(page.locator("#id_gpus_per_pod")).to_have_value("2")
    expect(page.locator("#id_image")).to_have_value("registry.example/train:1")
    expect(page.locator("#id_command")).to_have_value("python\ntrain.py")
    expect(page.locator("#id_args")).to_have_value("--epochs\n3")
    expect(page.locator("#id_env")).to_have_value("SIM_DURATION_SECONDS=3600")
    screenshot("resubmit form prefilled")
    page.get_by_role("button", name="Submit", exact=True).click()

    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    copy = Job.objects.exclude(pk=job.pk).get()
    expect(page.locator(".messages")).to_have_text(f"Job {copy.pk} submitted to queue batch.")
    expect(page.get_by_test_id("state")).to_have_text("pending")
    assert (copy.owner, copy.command, copy.args, copy.env, copy.gpus_per_pod) == (
        demo_member,
        job.command,
        job.args,
        job.env,
        job.gpus_per_pod,
    )
    screenshot("copy submitted")

    page.get_by_role("link", name="My jobs").first.click()

    expect(page.locator(f"#job-{copy.pk} td.state-pending")).to_have_text("pending")
    expect(page.locator(f"#job-{job.pk} td.state-cancelled")).to_have_text("cancelled")
    screenshot("my jobs")
