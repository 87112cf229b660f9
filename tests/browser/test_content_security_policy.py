"""Every kind of page runs under the Content-Security-Policy without a single violation: htmx's
live parts, plotly's charts, the admin, the API docs (Swagger UI) included."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from queues.models import CapabilityClass, JobState, Queue, Team
from tests.browser.conftest import PASSWORD
from tests.browser.test_chargeback import this_month  # noqa: F401 - usage for the charts
from tests.factories import JobFactory

pytestmark = pytest.mark.browser

# Collects violations as the browser reports them to the page (the console says so too).
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def visit(page: Page, path: str, console: list[str]) -> list[str]:
    """Open ``path``, let htmx and plotly finish, and return what the policy blocked."""
    response = page.goto(path)
    assert response is not None and response.status == 200, path
    page.wait_for_load_state("networkidle")
    blocked = page.evaluate("window.__csp")
    return [*blocked, *(m for m in console if "Content Security Policy" in m)]


def log_in_as(page: Page, user, lands: str) -> None:
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    page.goto("/login/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(lands)


@pytest.fixture
def watched(page: Page) -> tuple[Page, list[str]]:
    console: list[str] = []
    page.add_init_script(LISTEN)
    page.on("console", lambda message: console.append(message.text))
    return page, console


def test_member_pages_break_no_rule_of_the_policy(watched, live_server, mia, this_month):  # noqa: F811
    page, console = watched
    pending = JobFactory(
        owner=mia,
        team=Team.objects.get(name="vision"),
        queue=Queue.objects.get(name="batch"),
        capability_class=CapabilityClass.objects.get(name="any-gpu"),
        state=JobState.PENDING,
        submitted_at=timezone.now(),
    )
    assert visit(page, "/login/", console) == []
    log_in_as(page, mia, f"{live_server.url}/queues/")

    for path in [
        "/queues/",
        "/queues/batch/",
        "/jobs/",
        "/jobs/new",
        f"/jobs/{pending.pk}/",  # its alternatives load through htmx
        "/tokens/",
        "/usage/",
        "/quota-requests/",
        "/quota-requests/new",
        "/api/docs/",
    ]:
        assert visit(page, path, console) == [], path

    # htmx posts the preview and swaps it in: still nothing blocked.
    page.goto("/jobs/new")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Preview").click()
    assert answer.value.status == 200
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__csp") == []


def test_finance_charts_break_no_rule_of_the_policy(watched, live_server, fiona, this_month):  # noqa: F811
    page, console = watched
    log_in_as(page, fiona, f"{live_server.url}/chargeback/")

    assert visit(page, "/chargeback/", console) == []
    expect(page.locator("[data-testid=chart-by-team] .main-svg").first).to_be_visible()
    assert visit(page, "/chargeback/teams/vision/", console) == []


def test_admin_pages_break_no_rule_of_the_policy(watched, live_server, ada, example_policy):
    page, console = watched
    ada.is_superuser = True  # Django's own admin lists models only to users with permissions
    ada.save(update_fields=["is_superuser"])
    log_in_as(page, ada, f"{live_server.url}/manage/quotas/")

    for path in [
        "/manage/",
        "/manage/quotas/",
        "/manage/maintenance/",
        "/manage/audit/",
        "/manage/policy/",
        "/manage/reservations/",
        "/manage/requests/",
        "/admin/",
        "/admin/queues/queue/",
        "/admin/queues/queue/add/",
    ]:
        assert visit(page, path, console) == [], path
