"""Budgets: the policy's ``budgets`` section (clear errors naming the field), spend and forecast
against them on the page and the API, banners at 80 % and 100 % for finance and the team's
members, and /metrics series for alerting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from queues.models import Budget, BudgetScope
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import PolicyError, parse_policy
from queues.policy.text import policy_yaml
from tests.chargeback.helpers import NOV, hold
from tests.conftest import EXAMPLE_POLICY

pytestmark = pytest.mark.django_db


def _with_budgets(budgets):
    data = yaml.safe_load(EXAMPLE_POLICY.read_text())
    data["budgets"] = budgets
    return policy_yaml(data)


def _problems(budgets):
    with pytest.raises(PolicyError) as excinfo:
        policy_apply(text=_with_budgets(budgets))
    return [str(p) for p in excinfo.value.problems]


def test_the_example_policys_budgets_are_stored_and_export_back(example_policy):
    rows = {
        (b.scope, b.name, b.month and f"{b.month:%Y-%m}"): (b.amount, b.currency)
        for b in Budget.objects.all()
    }

    assert rows == {
        (BudgetScope.TEAM, "vision", None): (D("6000.00"), "EUR"),
        (BudgetScope.TEAM, "nlp", None): (D("12000.00"), "EUR"),
        (BudgetScope.TEAM, "nlp", "2026-12"): (D("14000.00"), "EUR"),
        (BudgetScope.TEAM, "research", None): (D("8000.00"), "EUR"),
        (BudgetScope.TEAM, "speech", None): (D("1500.00"), "EUR"),
        (BudgetScope.COST_CENTER, "CC-2001", None): (D("600.00"), "EUR"),
    }
    assert "No changes" in policy_apply(text=dump_policy(policy_current())).render()


def test_a_changed_budget_replaces_the_old_and_is_reported(example_policy):
    report = policy_apply(text=_with_budgets({"currency": "EUR", "teams": {"vision": 500}}))

    assert list(Budget.objects.values_list("name", "amount")) == [("vision", D("500.00"))]
    rendered = report.render()
    assert "budgets" in rendered and "teams.nlp" in rendered


@pytest.mark.parametrize(
    ("budgets", "problem"),
    [
        ({"currency": "EUR", "teams": {"vison": 10}}, "budgets.teams.vison: unknown team 'vison'"),
        (
            {"currency": "EUR", "cost_centers": {"CC-9": 10}},
            "budgets.cost_centers.CC-9: no team has cost center 'CC-9'",
        ),
        ({"currency": "EUR", "teams": {"nlp": -5}}, "budgets.teams.nlp.monthly: must be greater"),
        ({"currency": "EUR", "teams": {"nlp": "lots"}}, "budgets.teams.nlp.monthly: 'lots'"),
        (
            {"currency": "EUR", "teams": {"nlp": 10.005}},
            "budgets.teams.nlp.monthly: 10.005 has more than two decimal places",
        ),
        (
            {"currency": "EUR", "teams": {"nlp": {"months": {"2026-13": 5}}}},
            "budgets.teams.nlp.months.2026-13: is not a month",
        ),
        (
            {"currency": "EUR", "teams": {"nlp": {"monthly": 5, "weekly": 1}}},
            "budgets.teams.nlp.weekly: unknown field",
        ),
        ({"currency": "euro", "teams": {"nlp": 5}}, "budgets.currency: 'euro' is not a three"),
        ({"teams": {"nlp": 5}}, "budgets.currency: required"),
        ({"currency": "EUR", "teams": ["nlp"]}, "budgets.teams: must be a mapping"),
        ({"currency": "EUR", "team": {"nlp": 5}}, "budgets.team: unknown field"),
    ],
)
def test_a_bad_budget_names_its_field_and_stores_nothing(db, budgets, problem):
    problems = _problems(budgets)

    assert any(p.startswith(problem) for p in problems), problems
    assert not Budget.objects.exists()


@pytest.fixture
def sam(example_policy):
    return get_user_model().objects.get(username="sam")


AS_OF = "2026-11-16T00:00:00Z"  # 15 days of November left


@pytest.fixture
def november(example_policy):
    """Held continuously up to AS_OF (H100: weight 4, L4: 1; 1.20 EUR):

    - nlp: 8 H100s from Nov 7 16:00 (200 h): 7680.00 EUR, 64 % of 12000; over the 15 days of
      usage the portal has (nlp's idle ones count as 0) 512.00 EUR a day → forecast
      7680 + 15 × 512 = 15360.00 (128.0 %): over;
    - speech: 3 L4s from Nov 1 (360 h): 1296.00 EUR, 86.4 % of 1500: past 80 %, and its
      forecast 2592.00 (172.8 %) over;
    - research: 2 H100s from Nov 1: 3456.00 EUR, 43.2 % of 8000, forecast 6912.00 (86.4 %):
      past 80 %;
    - vision and search (cost center CC-2001) nothing."""
    end = datetime(2026, 11, 16, tzinfo=UTC)
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        devices=8,
        start=datetime(2026, 11, 7, 16, tzinfo=UTC),
        end=end,
    )
    hold(team="speech", gpu_class="l4", devices=3, start=NOV, end=end)
    hold(team="research", gpu_class="h100-80gb", devices=2, start=NOV, end=end)


def _budgets(client_or_api, **extra):
    response = client_or_api.get("/api/chargeback/", {"period": "2026-11", "as_of": AS_OF, **extra})
    return {b["name"]: b for b in response.json()["budgets"]}


def test_spend_and_forecast_against_budget_on_the_api(november, fiona, api_as):
    budgets = _budgets(api_as(fiona))

    assert {
        name: (b["spent"], b["spent_percent"], b["forecast"], b["forecast_percent"], b["level"])
        for name, b in budgets.items()
    } == {
        "CC-2001": ("0.00", "0.0", "0.00", "0.0", 0),
        "nlp": ("7680.00", "64.0", "15360.00", "128.0", 100),
        "research": ("3456.00", "43.2", "6912.00", "86.4", 80),
        "speech": ("1296.00", "86.4", "2592.00", "172.8", 100),
        "vision": ("0.00", "0.0", "0.00", "0.0", 0),
    }
    assert budgets["nlp"]["amount"] == "12000.00"  # November's: December has its own


def test_banners_for_finance_and_for_the_teams_members_only(november, fiona, mia, sam, sara):
    def banners(user):
        client = Client()
        client.force_login(user)
        html = client.get("/chargeback/", {"month": "2026-11", "as_of": AS_OF}).content.decode()
        return [part.split("</p>")[0] for part in html.split('data-testid="budget-banner">')[1:]]

    finance = banners(fiona)
    assert [b.split(" — ")[0] for b in finance] == [
        "<strong>Forecast over budget</strong>",
        "<strong>Forecast past 80 % of budget</strong>",
        "<strong>Forecast over budget</strong>",
    ]
    assert finance[0].endswith(
        "team nlp, 2026-11: 7,680.00 EUR spent so far (64.0 % of its budget of 12,000.00 EUR); "
        "forecast to the month&#x27;s end 15,360.00 EUR (128.0 %)."
    )
    assert [b.split(" — ")[1].split(",")[0] for b in banners(mia)] == ["team nlp"]
    assert [b.split(" — ")[1].split(",")[0] for b in banners(sam)] == ["team speech"]
    assert banners(sara) == []
    # A member sees a cost center's budget only when all its teams are theirs.
    client = Client()
    client.force_login(sara)
    assert (
        "cost center CC-2001"
        in client.get("/chargeback/", {"month": "2026-11", "as_of": AS_OF}).content.decode()
    )


def test_a_spent_budget_says_over_budget(example_policy, fiona):
    # speech: 6 L4s for 250 h = 1800.00 EUR, 120 % of 1500 (month over: no forecast).
    hold(team="speech", gpu_class="l4", devices=6, start=NOV, end=NOV + timedelta(hours=250))
    client = Client()
    client.force_login(fiona)

    html = client.get("/chargeback/", {"month": "2026-11"}).content.decode()

    assert (
        "<strong>Over budget</strong> — team speech, 2026-11: 1,800.00 EUR spent so far (120.0 %"
        in html
    )


def test_metrics_export_budget_amount_and_spend(example_policy):
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if now - start < timedelta(hours=2):
        pytest.skip("the month is younger than two hours")
    # speech: one L4 for the month's first hour: 1.20 EUR.
    hold(team="speech", gpu_class="l4", start=start, end=start + timedelta(hours=1))

    with override_settings(METRICS_TOKEN="t"):
        response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t")
    found = {
        (s.name, s.labels["scope"], s.labels["name"]): (s.value, s.labels["currency"])
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
        if s.name.startswith("gpuportal_budget_")
    }

    nlp = 14000.0 if start.month == 12 and start.year == 2026 else 12000.0
    assert found[("gpuportal_budget_amount", "team", "speech")] == (1500.0, "EUR")
    assert found[("gpuportal_budget_spend", "team", "speech")] == (1.2, "EUR")
    assert found[("gpuportal_budget_amount", "team", "nlp")] == (nlp, "EUR")
    assert found[("gpuportal_budget_spend", "cost_center", "CC-2001")] == (0.0, "EUR")
    assert len(found) == 10  # 5 budgets in force (nlp's own month over its monthly) × 2


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | st.sampled_from(["2026-12", "12.50", "1e3", "-0", "vision", "CC-1001"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(max_size=8) | st.integers() | st.sampled_from(["monthly", "months", "2026-11"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    budgets=VALUES
    | st.fixed_dictionaries(
        {
            "currency": st.sampled_from(["EUR", "eur", 5, None]),
            "teams": st.dictionaries(st.sampled_from(["vision", "nlp", "nobody", 3]), VALUES),
            "cost_centers": st.dictionaries(st.sampled_from(["CC-1001", "CC-9"]), VALUES),
        }
    )
)
def test_any_budgets_section_is_accepted_or_refused_with_reasons(budgets):
    existing = {"teams": {"vision": {"cost_center": "CC-1001"}, "nlp": {"cost_center": "CC-1002"}}}
    try:
        policy = parse_policy({"budgets": budgets}, existing=existing)
    except PolicyError as exc:
        assert exc.problems and all(str(p).startswith("budgets") for p in exc.problems)
        return
    for section in ("teams", "cost_centers"):
        for budget in policy["budgets"][section].values():
            amounts = [budget["monthly"], *budget["months"].values()]
            assert all(a is None or (a > 0 and a == a.quantize(D("0.01"))) for a in amounts)
