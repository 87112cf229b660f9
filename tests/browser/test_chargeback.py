"""Finance and a member in the browser: the chargeback page with its charts, at desktop and
phone width."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from queues.models import GpuClass, NodeState, NodeStateInterval, SharingMode
from tests.browser.conftest import PASSWORD
from tests.chargeback.helpers import hold
from tests.factories import NodeFactory

pytestmark = pytest.mark.browser


@pytest.fixture
def this_month(example_policy):
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=start,
        end=start + timedelta(hours=10),
    )
    hold(
        team="nlp",
        gpu_class="a100-80gb",
        share=Fraction(1, 7),
        mode=SharingMode.MIG,
        start=start + timedelta(hours=2),
        end=None,
    )
    hold(
        team="search",
        gpu_class="t4",
        share=Fraction(1, 4),
        mode=SharingMode.TIME_SLICED,
        start=start,
        end=start + timedelta(hours=10),
    )
    node = NodeFactory(name="l4-01", gpu_class=GpuClass.objects.get(name="l4"), gpu_count=8)
    NodeStateInterval.objects.create(
        node=node,
        gpu_class=node.gpu_class,
        state=NodeState.AVAILABLE,
        amount_numerator=8,
        started_at=start,
        ended_at=start + timedelta(hours=12),
    )
    NodeStateInterval.objects.create(
        node=node,
        gpu_class=node.gpu_class,
        state=NodeState.MAINTENANCE,
        amount_numerator=8,
        started_at=start + timedelta(hours=12),
    )


def _fits(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_finance_reads_the_month_with_charts_on_desktop_and_phone(
    page, log_in, screenshot, fiona, this_month
):
    fiona.set_password(PASSWORD)
    fiona.save(update_fields=["password"])
    log_in(fiona, lands=r"/chargeback/$")  # finance lands on the statement

    expect(page.get_by_test_id("total")).to_contain_text("EUR")
    expect(page.locator("[data-testid=chart-by-team] .main-svg").first).to_be_visible()
    expect(page.locator("[data-testid=chart-capacity] .main-svg").first).to_be_visible()
    expect(page.get_by_text("charged by allocation share")).to_be_visible()
    screenshot("finance desktop")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("[data-testid=chart-by-team] .main-svg").first).to_be_visible()
    _fits(page, 390)
    screenshot("finance phone")


def test_a_member_sees_usage_of_their_teams_only(page, log_in, screenshot, demo_member, this_month):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(demo_member)

    page.get_by_role("button", name="Menu").click()  # the navigation folds at phone width
    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("heading", name="Usage", exact=False).first).to_be_visible()
    expect(page.locator("table.statement").first).to_contain_text("vision")
    expect(page.locator("table.statement").first).not_to_contain_text("search")
    _fits(page, 390)
    screenshot("member phone")


@pytest.mark.parametrize("width", [390, 1400])
def test_finance_closes_last_month_after_seeing_what_is_frozen(
    page, log_in, screenshot, fiona, example_policy, width
):
    first = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (first - timedelta(days=1)).replace(day=1)
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=last_month,
        end=last_month + timedelta(hours=10),
    )
    fiona.set_password(PASSWORD)
    fiona.save(update_fields=["password"])
    page.set_viewport_size({"width": width, "height": 900})
    log_in(fiona, lands=r"/chargeback/$")
    page.goto(f"/chargeback/?month={last_month:%Y-%m}")

    page.get_by_test_id("close").click()

    expect(page.get_by_role("heading", name=f"Close {last_month:%B %Y}?")).to_be_visible()
    expect(page.get_by_test_id("frozen-cost")).to_contain_text("EUR")
    screenshot(f"{width} close confirm")
    _fits(page, width)
    page.get_by_role("button", name=f"Close {last_month:%B %Y} with these totals").click()
    expect(page.get_by_test_id("status")).to_contain_text("Closed")


@pytest.mark.parametrize("width", [390, 1400])
def test_an_admin_reopens_a_closed_month_and_finance_sees_why_and_what_changed(
    page, log_in, screenshot, ada, example_policy, width
):
    from chargeback.services import period_close

    first = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (first - timedelta(days=1)).replace(day=1)
    hold(team="vision", gpu_class="l4", start=last_month, end=last_month + timedelta(hours=10))
    period_close(month=last_month.date(), by=None, now=timezone.now())
    # reported late: 5 more L4 hours of the month
    hold(team="nlp", gpu_class="l4", start=last_month, end=last_month + timedelta(hours=5))
    ada.set_password(PASSWORD)
    ada.save(update_fields=["password"])
    page.set_viewport_size({"width": width, "height": 900})
    log_in(ada, lands=r"/manage/quotas/$")
    page.goto(f"/chargeback/?month={last_month:%Y-%m}")

    page.get_by_test_id("reopen").locator("summary").click()
    page.fill("#id_reopen_reason", "nlp's pods were reported after the close")
    page.get_by_role("button", name=f"Reopen {last_month:%B %Y}").click()

    expect(page.get_by_test_id("reopen-reason")).to_have_text(
        "nlp's pods were reported after the close"
    )
    expect(page.get_by_test_id("reopening")).to_contain_text(
        "Frozen then: 12.00 EUR; now: 18.00 EUR."
    )
    expect(page.get_by_test_id("reopen-changes")).to_contain_text("+6.00 EUR")
    expect(page.get_by_test_id("close")).to_be_visible()
    screenshot(f"{width} reopened")
    _fits(page, width)


def test_a_chart_of_a_month_nobody_used_says_so_instead_of_drawing_bare_axes(
    page, log_in, screenshot, fiona, example_policy
):
    fiona.set_password(PASSWORD)
    fiona.save(update_fields=["password"])
    log_in(fiona, lands=r"/chargeback/$")
    page.goto("/chargeback/?month=2026-02")

    chart = page.get_by_test_id("chart-by-team")
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart.locator(".annotation-text")).to_have_text("No data for this period")
    assert chart.get_attribute("data-empty") == "1"
    assert chart.locator(".xtick").count() == 0  # no axis from -1 to 6
    screenshot("empty month")


def test_a_trend_of_zeros_draws_no_axis_below_zero(page, log_in, fiona, example_policy):
    fiona.set_password(PASSWORD)
    fiona.save(update_fields=["password"])
    log_in(fiona, lands=r"/chargeback/$")
    page.goto("/chargeback/?month=2026-02")

    chart = page.get_by_test_id("chart-trend")
    expect(chart.locator(".main-svg").first).to_be_visible()
    ticks = chart.locator(".ytick text").all_text_contents()
    assert ticks and not any(t.startswith(("-", "−")) for t in ticks), ticks


@pytest.mark.parametrize("width", [1400, 390])
def test_a_member_sees_the_budget_banner_and_the_forecast_in_parts(
    page, log_in, screenshot, demo_member, example_policy, width
):
    # nlp: 8 H100s from Nov 7 16:00 to Nov 16: 7680.00 EUR of its 12000; at its run rate over
    # the 8 whole days of usage there are (921.60 EUR a day) its forecast is 7680 + 15 × 921.60
    # = 21504.00 (179.2 %): a banner for its members.
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        devices=8,
        start=datetime(2026, 11, 7, 16, tzinfo=UTC),
        end=datetime(2026, 11, 16, tzinfo=UTC),
    )
    page.set_viewport_size({"width": width, "height": 900})
    log_in(demo_member)

    page.goto("/usage/?month=2026-11&as_of=2026-11-16T00:00:00Z")

    banner = page.get_by_test_id("budget-banner")
    expect(banner).to_have_count(1)
    expect(banner).to_contain_text("Forecast over budget — team nlp, 2026-11: 7,680.00 EUR")
    expect(page.get_by_test_id("forecast")).to_contain_text("Running jobs to likely end")
    expect(page.get_by_test_id("forecast")).to_contain_text("21,504.00 EUR")
    expect(page.get_by_test_id("budgets")).to_contain_text("179.2 %")
    expect(page.get_by_test_id("budgets")).to_contain_text("12,000.00 EUR")
    assert "as_of=2026-11-16T00%3A00%3A00Z" in (page.get_by_test_id("csv").get_attribute("href"))
    _fits(page, width)
    screenshot(f"{width} budget banner and forecast")


def test_finance_asks_for_a_statement_as_of_an_instant(
    page, log_in, screenshot, fiona, example_policy
):
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=datetime(2026, 11, 10, 8, tzinfo=UTC),
        end=datetime(2026, 11, 10, 12, tzinfo=UTC),
    )
    fiona.set_password(PASSWORD)
    fiona.save(update_fields=["password"])
    log_in(fiona, lands=r"/chargeback/$")
    page.goto("/chargeback/?month=2026-11")
    expect(page.get_by_test_id("total")).to_have_text("38.40 EUR")  # 2 × 4 h × 4 × 1.20

    page.get_by_label("period").select_option("2026-11")
    page.get_by_label("as of", exact=False).fill("2026-11-10T10:00:00Z")
    page.get_by_role("button", name="Show").click()

    expect(page.get_by_test_id("total")).to_have_text("19.20 EUR")  # two of the four hours
    expect(page.get_by_test_id("status")).to_contain_text("As of")
    assert "as_of=2026-11-10T10%3A00%3A00Z" in page.get_by_test_id("csv").get_attribute("href")
    screenshot("as of an instant")

    page.goto("/chargeback/?month=2026-11&as_of=tomorrow")
    expect(page.get_by_text("as_of: expected a date")).to_be_visible()
