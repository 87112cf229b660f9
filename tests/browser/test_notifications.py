"""A member chooses what she is told and where, and an admin gives a team its webhook: the pages
at desktop and phone width."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from queues.models import NotificationWebhook, TeamWebhook
from queues.notifications.preferences import preferences_of
from tests.browser.conftest import PASSWORD

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1400, 390])
def test_a_member_turns_on_started_jobs_and_adds_a_webhook(
    logged_in_page: Page, screenshot, demo_member, width
):
    demo_member.email = "mia@example.org"
    demo_member.save(update_fields=["email"])
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/settings/notifications/")

    expect(page.get_by_role("heading", level=1)).to_have_text("Notifications")
    expect(page.locator(".lead")).to_contain_text("mia@example.org")
    failed = page.get_by_label("My job failed by e-mail")
    started = page.get_by_label("My job started by e-mail")
    expect(failed).to_be_checked()
    expect(started).not_to_be_checked()
    screenshot(f"defaults at {width}")

    started.check()
    page.get_by_label("Webhook URL").fill("https://hooks.example.org/services/T0/B0")
    page.get_by_role("button", name="Save").click()

    expect(page.locator(".messages")).to_contain_text("Notification settings saved.")
    expect(page.get_by_label("My job started by e-mail")).to_be_checked()
    secret = NotificationWebhook.objects.get(user=demo_member).secret
    expect(page.get_by_test_id("webhook-secret")).to_have_text(secret)
    assert preferences_of(demo_member)[("job_started", "email")] is True
    assert NotificationWebhook.objects.get(user=demo_member).url == (
        "https://hooks.example.org/services/T0/B0"
    )
    # Nothing on the page is wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(f"saved at {width}")


@pytest.mark.parametrize("width", [1400, 390])
def test_an_admin_gives_a_team_its_webhook(
    page: Page, log_in, screenshot, ada, example_policy, width
):
    ada.set_password(PASSWORD)
    ada.save(update_fields=["password"])
    log_in(ada, lands=r"/manage/quotas/$")
    page.set_viewport_size({"width": width, "height": 900})
    page.get_by_role("link", name="Team webhooks").click()
    page.get_by_role("link", name="vision", exact=True).click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Team vision: webhook")
    expect(page.get_by_label("A job of the team failed")).to_be_checked()
    expect(page.get_by_label("A job of the team started")).not_to_be_checked()
    page.get_by_label("Webhook URL").fill("ftp://files.example.org/x")
    page.get_by_role("button", name="Save").click()
    expect(page.locator('[data-field="url"]')).to_have_text(
        "an http:// or https:// address without spaces, at most 500 characters"
    )
    assert not TeamWebhook.objects.exclude(url="").exists()

    page.get_by_label("Webhook URL").fill("https://hooks.example.org/services/T0/vision")
    page.get_by_label("A job of the team will be stopped by a drain").check()
    page.get_by_role("button", name="Save").click()

    expect(page.locator(".messages")).to_contain_text("Team vision's webhook saved.")
    hook = TeamWebhook.objects.get(team__name="vision")
    assert (hook.url, hook.events) == (
        "https://hooks.example.org/services/T0/vision",
        ["job_failed", "job_preempted", "job_drain_ahead"],
    )
    expect(page.get_by_test_id("webhook-secret")).to_have_text(hook.secret)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(f"team webhook at {width}")
