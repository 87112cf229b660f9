"""An admin opens /ops/ in the browser and every chart draws, with no console error; a member
is refused."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from queues.models import (
    CapacitySample,
    GpuClass,
    PendingSample,
    Queue,
    QueueStats,
    Team,
    TeamStats,
)
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
    # the headline first; the rest folded until opened
    expect(page.get_by_test_id("headline-l4").get_by_test_id("allocated")).to_be_visible()
    expect(page.locator("#capacity-l4")).to_be_hidden()
    expect(page.locator("[data-testid=chart-team-usage] .main-svg")).to_have_count(0)
    for section in ("Capacity by state", "The last 24 hours", "Charts"):
        page.locator("summary", has_text=section).click()
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
    page.locator("summary", has_text="Charts").click()
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


@pytest.fixture
def week_with_advice(example_policy):
    """A week in which a queue's p90 wait is past its target (5h10m against 4h)."""
    QueueStats.objects.create(
        queue=Queue.objects.get(name="training"),
        wait_p50=timedelta(hours=1),
        wait_p90=timedelta(hours=5, minutes=10),
        pending=3,
        computed_at=timezone.now(),
    )


def test_ops_opens_on_the_headline_readable_on_a_phone(
    page, log_in, screenshot, ada, history, week_with_advice
):
    ada.set_password(PASSWORD)
    ada.save(update_fields=["password"])
    log_in(ada, lands=r"/manage/")
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/ops/")
        card = page.get_by_test_id("headline-l4")
        expect(card.get_by_test_id("allocated")).to_be_visible()
        advice = page.locator(".recommendation", has_text="queue training: p90 wait 5h10m")
        expect(advice).to_be_visible()
        # the page never scrolls sideways, and each headline card fits the screen
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
        screenshot(f"ops headline {width}")
    advice.get_by_role("link", name="Edit queue training").click()
    expect(page).to_have_url(re.compile(r"/manage/policy/queues/training/$"))
