"""Elastic capacity in the browser: the catalog's node pools, a job waiting for a new node, and
the /ops/ section, at desktop and phone width (screenshots under the browser screenshots dir)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from queues.models import (
    CapabilityClass,
    JobState,
    NodePool,
    NodeProvisioning,
    PoolNode,
    ProvisioningState,
    Queue,
    Team,
)
from queues.policy.apply import policy_apply
from tests.browser.conftest import PASSWORD, SCREENSHOTS
from tests.conftest import ROOT
from tests.factories import JobFactory

pytestmark = pytest.mark.browser


@pytest.fixture
def elastic_state(example_policy, demo_member):
    policy_apply(text=(ROOT / "examples" / "policy-elastic.yaml").read_text())
    pool = NodePool.objects.get(name="h100-burst")
    now = timezone.now()
    PoolNode.objects.create(
        pool=pool,
        name="h100-burst-001",
        gpus=8,
        requested_at=now - timedelta(minutes=40),
        ready_at=now - timedelta(minutes=37, seconds=30),
        idle_seconds=1800,
    )
    NodeProvisioning.objects.create(
        pool=pool,
        object_name="gpuportal-h100-burst-a",
        nodes=1,
        requested_at=now - timedelta(minutes=40),
        state=ProvisioningState.PROVISIONED,
        nodes_ready=["h100-burst-001"],
        for_jobs=[1],
    )
    NodeProvisioning.objects.create(
        pool=pool,
        object_name="gpuportal-h100-burst-b",
        nodes=1,
        requested_at=now - timedelta(seconds=20),
        for_jobs=[2],
    )
    ready, ready_by = now + timedelta(minutes=1, seconds=40), now + timedelta(minutes=2, seconds=40)
    job = JobFactory(
        owner=demo_member,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="training"),
        capability_class=CapabilityClass.objects.get(name="fp8"),
        gpus_per_pod=8,
        state=JobState.PENDING,
        position=1,
        queue_length=1,
        estimated_start=ready_by,
        likely_start=ready,
        pending_reasons=[
            {
                "code": "Provisioning",
                "message": "needs 8 h100-80gb GPUs; a node is being provisioned for it, "
                "ready in about 1 min (p90 2 min)",
                "details": {
                    "gpu_class": "h100-80gb",
                    "node_pool": "h100-burst",
                    "ready_at": ready.isoformat(),
                    "ready_by": ready_by.isoformat(),
                },
                "hint": "nothing to do: it starts on the new node once it is Ready, "
                "or sooner if GPUs free up",
            }
        ],
    )
    return job


@pytest.mark.parametrize("width", [1400, 390])
def test_a_member_and_an_admin_see_the_pools_and_a_job_waiting_for_a_node(
    page, log_in, demo_member, elastic_state, width
):
    page.set_viewport_size({"width": width, "height": 900})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    log_in(demo_member)
    pools = page.get_by_test_id("node-pools")
    expect(pools).to_contain_text("h100-80gb")
    row = pools.locator('tr[data-pool="h100-burst"]')
    expect(row.locator('td[data-label="Nodes ready"]')).to_have_text("1")
    expect(row.locator('td[data-label="Provisioning"]')).to_have_text("1")
    expect(row.locator('td[data-label="Possible"]')).to_have_text("0 more")
    pools.screenshot(path=str(SCREENSHOTS / f"elastic-catalog-{width}.png"))

    page.goto(f"/jobs/{elastic_state.pk}/")
    expect(page.get_by_test_id("new-node")).to_contain_text(
        "Waiting for a new node, ready in about 1 min"
    )
    page.locator("#job-status").screenshot(path=str(SCREENSHOTS / f"elastic-job-{width}.png"))

    admin = get_user_model().objects.create_user("ada", password=PASSWORD, is_staff=True)
    page.context.clear_cookies()
    log_in(admin, lands=r"/")
    page.goto("/ops/")
    section = page.get_by_test_id("ops-node-pools")
    burst = section.locator('tr[data-pool="h100-burst"]')
    expect(burst.locator('td[data-label="Nodes came"]')).to_have_text("1")
    expect(burst.locator('td[data-label="Lead time"]')).to_have_text("2m30s, 2m30s")
    expect(burst.locator('td[data-label="Ready, empty GPU-hours"]')).to_have_text("4.0")
    expect(burst.locator('td[data-label="Jobs that waited"]')).to_have_text("2")
    section.screenshot(path=str(SCREENSHOTS / f"elastic-ops-{width}.png"))
