"""The chargeback page, its CSV and the API: the same numbers, and each member sees only their
teams' lines."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from django.test import Client
from django.utils import timezone

from chargeback.models import Period
from queues.models import SharingMode
from tests.chargeback.helpers import hold

pytestmark = pytest.mark.django_db
D = Decimal
MONTH = "2026-11"


@pytest.fixture
def november(example_policy):
    """Usage of vision, nlp and search in November 2026."""
    # vision: 2 × H100 for 10 h = 20 GPU-h × 4 = 80 normalized × 1.20 = 96.00 EUR
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 2, 10, tzinfo=UTC),
    )
    # nlp: a 1g.10gb slice of an A100 for 7 h = 1 GPU-h × 2.5 × 1.20 = 3.00 EUR
    hold(
        team="nlp",
        gpu_class="a100-80gb",
        share=Fraction(1, 7),
        mode=SharingMode.MIG,
        start=datetime(2026, 11, 3, 8, tzinfo=UTC),
        end=datetime(2026, 11, 3, 15, tzinfo=UTC),
    )
    # search: one of 4 T4 replicas for 10 h = 2.5 GPU-h × 0.5 × 1.20 = 1.50 EUR
    hold(
        team="search",
        gpu_class="t4",
        share=Fraction(1, 4),
        mode=SharingMode.TIME_SLICED,
        start=datetime(2026, 11, 4, tzinfo=UTC),
        end=datetime(2026, 11, 4, 10, tzinfo=UTC),
    )


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _csv(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_page_and_api_totals_agree_with_the_sum_of_lines(november, fiona, api_as):
    client = _client(fiona)
    page = client.get("/chargeback/", {"month": MONTH})
    exported = _csv(client.get("/chargeback/", {"month": MONTH, "format": "csv"}).content.decode())
    data = api_as(fiona).get("/api/chargeback/", {"period": MONTH}).json()
    api_csv = _csv(
        api_as(fiona).get("/api/chargeback/", {"period": MONTH, "format": "csv"}).content.decode()
    )

    assert page.status_code == 200
    assert [line["cost"] for line in data["lines"]] == ["3.00", "1.50", "96.00"]
    assert data["totals"]["cost"] == {"EUR": "100.50"}
    assert sum(D(line["cost"]) for line in data["lines"]) == D("100.50")
    assert page.context["report"].totals.cost == {"EUR": D("100.50")}
    assert b"100.50 EUR" in page.content
    lines = [row for row in exported if row["kind"] == "line"]
    [total] = [row for row in exported if row["kind"] == "line total"]
    assert [row["cost"] for row in lines] == ["3.00", "1.50", "96.00"]
    assert total["cost"] == "100.50"
    # (Fetched a moment apart: each is as of its own instant, said in every row.)
    assert all(row["as_of"] and row["period"] == MONTH for row in exported + api_csv)
    assert [{**row, "as_of": ""} for row in exported] == [{**row, "as_of": ""} for row in api_csv]
    assert [row["rate_card_versions"] for row in lines] == ["2026-01-01T00:00:00Z"] * 3
    assert "charged by allocation share" in lines[1]["note"]


def test_pages_write_money_with_thousands_separated_and_exports_keep_plain_decimals(
    example_policy, fiona, api_as
):
    # vision: 8 × H100 for 412 h 29 min 45 s = 3299.967 GPU-h × 4 × 1.20 = 15839.84 EUR
    interval = hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=8,
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 19, 4, 29, 45, tzinfo=UTC),
    )
    client = _client(fiona)

    page = client.get("/chargeback/", {"month": MONTH}).content.decode()
    team = client.get("/chargeback/teams/vision/", {"month": MONTH}).content.decode()
    job = client.get(f"/chargeback/jobs/{interval.job_id}/", {"month": MONTH}).content.decode()
    exported = _csv(client.get("/chargeback/", {"month": MONTH, "format": "csv"}).content.decode())
    data = api_as(fiona).get("/api/chargeback/", {"period": MONTH}).json()

    assert '<td class="num">15,839.84 EUR</td>' in page
    assert 'data-testid="total">15,839.84 EUR</th>' in page
    assert 'data-testid="headline-cost">15,839.84 EUR' in page
    assert "15839.84" not in page
    # GPU-hours too: 8 × 412.496 h
    assert '<td class="num">3,299.967</td><td class="num">3,299.967</td>' in page
    assert '<td class="num">13,199.867</td>' in page  # normalized: × 4
    assert 'data-testid="total">15,839.84 EUR</th>' in team
    assert "15,839.84 EUR" in job
    assert [row["cost"] for row in exported if row["kind"] == "line"] == ["15839.84"]
    assert [line["cost"] for line in data["lines"]] == ["15839.84"]
    assert data["totals"]["cost"] == {"EUR": "15839.84"}


def test_the_api_groups_any_range(november, fiona, api_as):
    response = api_as(fiona).get(
        "/api/chargeback/",
        {"start": "2026-11-01", "end": "2026-12-01", "group_by": "gpu_class"},
    )

    assert response.status_code == 200
    assert [(x["gpu_class"], x["gpu_hours"], x["cost"]) for x in response.json()["lines"]] == [
        ("a100-80gb", "1.000", "3.00"),
        ("h100-80gb", "20.000", "96.00"),
        ("t4", "2.500", "1.50"),
    ]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"start": "yesterday", "end": "2026-12-01"}, "start"),
        ({"start": "2026-11-01"}, "end"),
        ({"start": "2026-12-01", "end": "2026-11-01"}, "end"),
        ({"start": "2026-11-01", "end": "2026-12-01", "group_by": "team,colour"}, "group_by"),
        ({"period": "2026-13"}, "period"),
        ({"period": MONTH, "format": "xml"}, "format"),
        ({"start": "2026-11-01", "end": "2099-12-01"}, "end"),
        ({"start": ""}, "start"),
        ({"period": ""}, "period"),
        ({"format": ""}, "format"),
        ({"start": "2026-11-01", "end": ""}, "end"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_parameter(fiona, api_as, params, field):
    response = api_as(fiona).get("/api/chargeback/", params)

    assert response.status_code == 400
    assert field in response.json()


def test_no_parameters_give_the_current_months_statement(fiona, api_as):
    response = api_as(fiona).get("/api/chargeback/")

    assert response.status_code == 200
    this_month = timezone.now().strftime("%Y-%m")
    assert response.json()["period"] == this_month
    again = api_as(fiona).get(
        "/api/chargeback/", {"period": this_month, "as_of": response.json()["as_of"]}
    )
    assert response.json() == again.json()


def test_group_by_without_a_range_is_a_400_naming_it(fiona, api_as):
    response = api_as(fiona).get("/api/chargeback/", {"group_by": "team"})

    assert response.status_code == 400
    assert response.json() == {
        "group_by": ["with group_by, give start and end (or period=YYYY-MM)"]
    }


def test_a_member_sees_only_their_teams_lines_in_the_api_page_and_csv(november, sara, api_as):
    # sara is in search only.
    data = api_as(sara).get("/api/chargeback/", {"period": MONTH}).json()
    ranged = (
        api_as(sara)
        .get("/api/chargeback/", {"start": "2026-11-01", "end": "2026-12-01", "group_by": "team"})
        .json()
    )
    client = _client(sara)
    page = client.get("/usage/", {"month": MONTH})
    exported = _csv(client.get("/usage/", {"month": MONTH, "format": "csv"}).content.decode())

    assert [line["team"] for line in data["lines"]] == ["search"]
    assert data["totals"]["cost"] == {"EUR": "1.50"}
    assert [line["team"] for line in ranged["lines"]] == ["search"]
    assert {row["team"] for row in exported if row["kind"] == "line"} == {"search"}
    assert b"CC-1001" not in page.content and b"h100-80gb" not in page.content
    assert client.get("/chargeback/teams/vision/", {"month": MONTH}).status_code == 404
    assert client.get("/chargeback/teams/search/", {"month": MONTH}).status_code == 200


def test_a_member_cannot_open_another_teams_job(november, sara):
    from queues.models import UsageInterval

    vision_job = UsageInterval.objects.get(team__name="vision").job_id
    assert _client(sara).get(f"/chargeback/jobs/{vision_job}/").status_code == 404


def test_anonymous_gets_the_login_page_and_a_401(client, api):
    assert client.get("/chargeback/")["Location"].startswith("/login/")
    assert api.get("/api/chargeback/", {"period": MONTH}).status_code == 401


def test_only_finance_may_close_and_the_page_says_closed(november, fiona, mia):
    assert _client(mia).post("/chargeback/close", {"month": MONTH}).status_code == 404
    assert _client(mia).get("/chargeback/close", {"month": MONTH}).status_code == 404
    client = _client(fiona)

    # One click shows what would be frozen; nothing is closed yet.
    shown = client.get("/chargeback/close", {"month": MONTH})
    assert shown.status_code == 200
    assert b'data-testid="frozen-cost">100.50 EUR' in shown.content
    assert not Period.objects.exists()

    response = client.post(
        "/chargeback/close",
        {"month": MONTH, "confirm": shown.context["fingerprint"]},
        follow=True,
    )

    assert b"Closed 2026-11." in response.content
    assert response.context["report"].closed


def test_a_close_confirmed_for_totals_that_changed_since_shows_them_again(november, fiona):
    from queues.models import UsageInterval

    client = _client(fiona)
    shown = client.get("/chargeback/close", {"month": MONTH})
    # Late usage for November arrives between the look and the click.
    late = UsageInterval.objects.get(team__name="vision")
    late.pk = None
    late.pod_uid = "late-pod"
    late.save()

    again = client.post(
        "/chargeback/close", {"month": MONTH, "confirm": shown.context["fingerprint"]}
    )

    assert again.status_code == 200
    assert again.context["changed"] is True
    assert b'data-testid="frozen-cost">196.50 EUR' in again.content  # 96.00 more
    assert not Period.objects.exists()


def test_a_month_that_cannot_close_says_why_before_anyone_confirms(fiona, example_policy):
    page = _client(fiona).get("/chargeback/close", {"month": "2099-01"})

    assert page.status_code == 200
    assert "It cannot be closed now: 2099-01 has not ended yet" in page.content.decode()
    assert b"disabled" in page.content


def test_drill_down_from_team_to_job_to_intervals(november, fiona):
    from queues.models import UsageInterval

    client = _client(fiona)
    team = client.get("/chargeback/teams/vision/", {"month": MONTH})
    job_id = UsageInterval.objects.get(team__name="vision").job_id
    job = client.get(f"/chargeback/jobs/{job_id}/", {"month": MONTH})

    assert team.context["totals"].cost == {"EUR": D("96.00")}
    assert [row["cost"] for row in job.context["rows"]] == [D("96.00")]
    # The rate card reads as the day it took effect; the raw instant only on hover.
    assert '<small title="2026-01-01T00:00:00Z">from 2026-01-01</small>' in job.content.decode()


def test_a_bad_month_is_a_400_page(fiona):
    response = _client(fiona).get("/chargeback/", {"month": "november"})

    assert response.status_code == 400
    assert b"month: &#x27;november&#x27; is not a month" in response.content


def test_the_report_loads_plotly_from_the_portal_not_a_cdn(fiona):
    page = _client(fiona).get("/chargeback/").content.decode()

    assert '<script src="/vendor/plotly.min.js?v=' in page
    assert "cdn" not in page.lower()


def test_finance_sees_chargeback_in_the_navigation_and_members_usage(fiona, mia):
    assert b'href="/chargeback/">Chargeback' in _client(fiona).get("/queues/").content
    assert b'href="/usage/">Usage' in _client(mia).get("/queues/").content


@pytest.mark.parametrize(
    "url", ["/chargeback/?month=9999-12", "/chargeback/jobs/99999999999999999999999/"]
)
def test_out_of_range_input_is_refused_not_a_500(fiona, url):
    assert _client(fiona).get(url).status_code in (400, 404)
