"""An admin opens /ops/ in the browser and every chart draws, with no console error; a member
is refused."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from queues.models import CapacitySample, GpuClass, PendingSample, Queue, Team, TeamStats
from queues.reconcile.history import minute_of, wait_days_refresh
from tests.browser.conftest import PASSWORD

pytestmark = pytest.mark.browser
CHARTS = [
    "capacity-now",
    "capacity-days",
    "allocation-days",
    "allocation-hours",
    "waits",
    "slo",
    "pending-now",
    "pending-hours",
    "fragmentation-now",
    "fragmentation-hours",
    "team-usage",
]


@pytest.fixture
def history(example_policy):
    now = minute_of(timezone.now())
    l4 = GpuClass.objects.get(name="l4")
    batch = Queue.objects.get(name="batch")
    for minute in range(180):
        at = now - timedelta(minutes=minute)
        CapacitySample.objects.create(
            at=at,
            gpu_class=l4,
            in_use=Decimal(minute % 8),
            free=Decimal(16 - minute % 8),
            unhealthy=Decimal(4),
            slots={"1": 16 - minute % 8, "2": 4, "4": 1, "8": 0},
            largest_free=4,
        )
        PendingSample.objects.create(at=at, queue=batch, code="QuotaExceeded", jobs=minute % 3 + 1)
    TeamStats.objects.create(
        team=Team.objects.get(name="vision"),
        held={"l4": "3.000"},
        recent_usage=Decimal(12),
        computed_at=now,
    )
    wait_days_refresh(now=now)


def test_an_admin_sees_every_chart_and_a_member_is_refused(
    page, log_in, screenshot, ada, mia, history
):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    ada.set_password(PASSWORD)
    ada.save(update_fields=["password"])
    log_in(ada, lands=r"/manage/")

    page.get_by_role("link", name="Operations").click()
    expect(page).to_have_url(re.compile(r"/ops/$"))
    for name in CHARTS:
        # A dozen charts on a machine shared with other test runs: allow plotly.js the time.
        expect(page.locator(f"[data-testid=chart-{name}] .main-svg").first).to_be_visible(
            timeout=30_000
        )
    expect(page.locator("#capacity-l4")).to_contain_text("l4")
    expect(page.get_by_test_id("duty-off")).to_contain_text("Not configured", timeout=30_000)
    # nothing was preempted or failed: the waste table says so, and no empty chart is drawn
    expect(page.get_by_test_id("waste")).to_contain_text("None.")
    expect(page.locator("[data-testid=chart-waste]")).to_have_count(0)
    screenshot("ops desktop")
    # on a phone: tables scroll in their own boxes, the page itself never sideways
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("[data-testid=chart-team-usage] .main-svg").first).to_be_visible(
        timeout=30_000
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot("ops phone")
    assert errors == []

    page.context.clear_cookies()
    mia.set_password(PASSWORD)
    mia.save(update_fields=["password"])
    log_in(mia)
    expect(page.get_by_role("link", name="Operations")).to_have_count(0)
    response = page.goto("/ops/")
    assert response is not None and response.status == 403
