"""An admin's morning in the browser: raise a quota in the grid and see the job it held back start
on the next reconcile; a member files a quota request, the admin approves it, the member sees it.

As in the member journey, the world moves only when the test runs a reconcile cycle."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import Browser, Page, expect

from queues.cluster.adapter import Cluster
from queues.models import CapabilityClass, JobState, Queue, Quota, QuotaRequest, Team
from queues.operations.services import quota_update
from queues.reconcile.cycle import reconcile_cycle
from queues.reconcile.facts import CycleReport
from tests.browser.conftest import PASSWORD
from tests.factories import JobFactory

pytestmark = pytest.mark.browser


@pytest.fixture
def cycle(sim_cluster, example_policy) -> Iterator[Callable[[], CycleReport]]:
    adapter = Cluster.from_kubeconfig(str(sim_cluster.kubeconfig))
    yield lambda: reconcile_cycle(cluster=adapter, now=sim_cluster.now())
    adapter.close()


@pytest.fixture
def admin(ada):
    ada.set_password(PASSWORD)
    ada.save(update_fields=["password"])
    return ada


def log_in(page: Page, user, lands: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(lands))


def test_an_admin_raises_a_quota_and_the_held_back_job_starts(
    page: Page, screenshot, admin, demo_member, cycle
):
    cycle()
    quota_update(team="vision", gpu_class="t4", nominal=Decimal(0), borrowing_limit=Decimal(0))
    job = JobFactory(
        owner=demo_member,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="interactive"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        env={"SIM_DURATION_SECONDS": "600"},
    )
    cycle()
    job.refresh_from_db()
    # no quota at all on the only class it may use: it can never start, for want of quota
    assert (job.state, job.pending_reasons[0]["code"]) == (JobState.PENDING, "NeverFits")

    log_in(page, admin, r"/manage/quotas/$")
    cell = page.locator("#quota-vision-t4")
    expect(cell.locator(".nominal")).to_have_text("0")
    expect(cell.locator(".held-back")).to_have_text("1")
    expect(page.locator("#capacity-t4 .in-service")).to_have_text("16")
    screenshot("quota grid")

    cell.get_by_role("link").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Quota of vision for t4")
    page.fill("#id_nominal", "1")
    page.fill("#id_borrowing_limit", "0")
    page.get_by_role("button", name="Save quota").click()

    expect(page).to_have_url(re.compile(r"/manage/quotas/$"))
    expect(page.locator(".messages")).to_contain_text("Quota of vision for t4 is now 1 nominal")
    expect(page.locator("#quota-vision-t4 .nominal")).to_have_text("1")
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    page.reload()
    expect(page.locator("#quota-vision-t4 .in-use")).to_have_text("0.25")
    expect(page.locator("#quota-vision-t4 .held-back")).to_have_count(0)
    screenshot("quota raised")

    page.goto("/manage/audit/?source=page")
    expect(page.locator(".audit-entry").first).to_contain_text("vision · t4")
    expect(page.locator(".audit-entry").first).to_contain_text("nominal: 0.000 → 1.000")
    screenshot("audit log")


def test_a_member_files_a_quota_request_and_sees_it_approved(
    browser: Browser, page: Page, live_server, screenshot, admin, demo_member, example_policy
):
    log_in(page, demo_member, r"/queues/$")
    page.get_by_role("link", name="Quota requests").click()
    page.get_by_role("link", name="Ask for more quota").click()
    page.select_option("#id_team", "vision")
    page.select_option("#id_gpu_class", "a100-80gb")
    page.fill("#id_nominal", "6")
    page.fill("#id_borrowing_limit", "4")
    page.fill("#id_justification", "Segmentation runs wait on quota every night.")
    screenshot("request form")
    page.get_by_role("button", name="File the request").click()

    request = QuotaRequest.objects.get()
    expect(page).to_have_url(re.compile(rf"/quota-requests/{request.pk}/$"))
    expect(page.locator("#request-status")).to_contain_text("waiting for an admin")
    expect(page.locator("#evidence")).to_contain_text("0.00 GPU-hours")

    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    admin_page = context.new_page()
    log_in(admin_page, admin, r"/manage/quotas/$")
    admin_page.get_by_role("link", name="Quota requests").first.click()
    admin_page.locator(f"#request-{request.pk}").get_by_role("link").click()
    # She grants less than asked, and says why.
    expect(admin_page.locator("#approve_nominal")).to_have_value("6.000")
    admin_page.fill("#approve_nominal", "5")
    admin_page.fill("#approve_reason", "One A100 stays free for the Q1 reservation.")
    admin_page.get_by_role("button", name=re.compile("^Approve")).click()
    expect(admin_page.locator(".messages")).to_contain_text(
        "Approved (less than asked): vision now has 5 nominal + 4 borrowing of a100-80gb."
    )
    context.close()

    page.reload()
    expect(page.locator("#request-status")).to_contain_text("approved in part by ada")
    expect(page.locator("#approve-reason")).to_have_text(
        "One A100 stays free for the Q1 reservation."
    )
    quota = Quota.objects.get(team__name="vision", gpu_class__name="a100-80gb")
    assert (quota.nominal, quota.borrowing_limit) == (Decimal("5.000"), Decimal("4.000"))
    screenshot("request approved")


@pytest.mark.parametrize("width", [390, 1280])
def test_the_admin_pages_fit_a_phone_and_a_desktop(page: Page, screenshot, admin, cycle, width):
    cycle()
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, admin, r"/manage/quotas/$")
    for path in (
        "/manage/quotas/",
        "/manage/reservations/",
        "/manage/reservations/nlp-conference-run/",
        "/manage/policy/",
        "/manage/policy/queues/batch/",
        "/manage/maintenance/",
        "/manage/requests/",
        "/manage/audit/",
        "/quota-requests/new",
    ):
        page.goto(path)
        if path == "/manage/reservations/":
            expect(page.locator("#timeline-h100-80gb .plot-container")).to_be_visible()
        screenshot(f"{width} {path}")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        wide = page.evaluate(
            "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
            " > window.innerWidth + 1 && !e.closest('.scroll')).map(e => e.tagName + '.' +"
            " e.className).slice(0, 5)"
        )
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px: {wide}"


@pytest.mark.parametrize("width", [390, 1400])
def test_a_drain_shows_the_jobs_it_stops_before_the_admin_confirms(
    page: Page, screenshot, admin, demo_member, cycle, sim_cluster, settings, width
):
    from datetime import timedelta

    settings.CLUSTER_KUBECONFIG = str(sim_cluster.kubeconfig)
    job = JobFactory(
        owner=demo_member,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="min-40gb"),
        gpus_per_pod=8,
        runtime_limit=timedelta(hours=24),
        env={"SIM_DURATION_SECONDS": "inf"},
    )
    cycle()
    sim_cluster.advance(30)
    cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    (node,) = job.nodes
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, admin, r"/manage/quotas/$")
    page.goto("/manage/maintenance/")
    page.fill("#id_nodes", node)
    page.fill("#id_reason", "PSU swap")
    deadline = sim_cluster.now() + timedelta(hours=1)
    page.fill("#id_deadline", deadline.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Check who is affected").click()

    impact = page.locator("#drain-impact")
    expect(impact).to_contain_text("1 job runs there; 1 is stopped at the deadline.")
    expect(page.locator(f"#drained-job-{job.pk}")).to_contain_text("stopped")
    screenshot(f"{width} drain impact")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the drain's impact scrolls sideways by {overflow}px at {width}px"
    assert not sim_cluster.core().read_node(node).spec.unschedulable

    page.get_by_role("button", name="Drain 1 node").click()
    expect(page.locator(".messages")).to_contain_text(f"Drained {node}")
    assert sim_cluster.core().read_node(node).spec.unschedulable is True
