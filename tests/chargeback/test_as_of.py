"""Statements as of an instant: the page, its CSV and the API give the same totals for the same
``as_of``, count usage up to it and nothing after, and say it."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chargeback.selectors import period_report
from chargeback.services import period_close
from queues.models import UsageInterval
from tests.chargeback.helpers import DEC, NOV, hold

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def _csv(response):
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def this_month(example_policy):
    """Usage of the current month: one hold that ended, one still open."""
    now = timezone.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    # vision: 2 H100 (weight 4, 1.20 EUR) for the first hour of the month: 8 × 1.20 = 9.60 EUR.
    hold(
        team="vision",
        gpu_class="h100-80gb",
        devices=2,
        start=start,
        end=start + timedelta(hours=1),
    )
    # nlp: 1 H100 since the month began, still held.
    hold(team="nlp", gpu_class="h100-80gb", start=start, end=None)
    return start


def test_page_csv_and_api_agree_to_the_cent_for_the_same_as_of(this_month, fiona, api_as):
    as_of = this_month + timedelta(minutes=30)
    if as_of > timezone.now():
        pytest.skip("the month is younger than 30 minutes")
    text = as_of.strftime("%Y-%m-%dT%H:%M:%SZ")
    month = f"{this_month:%Y-%m}"
    client = _client(fiona)

    page = client.get("/chargeback/", {"month": month, "as_of": text})
    exported = _csv(client.get("/chargeback/", {"month": month, "as_of": text, "format": "csv"}))
    data = api_as(fiona).get("/api/chargeback/", {"period": month, "as_of": text}).json()
    api_csv = _csv(
        api_as(fiona).get("/api/chargeback/", {"period": month, "as_of": text, "format": "csv"})
    )

    # Half an hour in: vision 2 H100 × 0.5 h × 4 × 1.20 = 4.80; nlp 1 H100 × 0.5 h = 2.40.
    assert [(line["team"], line["cost"]) for line in data["lines"]] == [
        ("nlp", "2.40"),
        ("vision", "4.80"),
    ]
    assert data["totals"]["cost"] == {"EUR": "7.20"}
    assert data["as_of"] == text
    assert page.context["report"].totals.cost == {"EUR": D("7.20")}
    assert page.context["report"].as_of == as_of
    assert page.context["trend"][-1][1].cost == {"EUR": D("7.20")}  # the chart: the same instant
    assert b"7.20 EUR" in page.content
    [total] = [row for row in exported if row["kind"] == "line total"]
    assert total["cost"] == "7.20"
    assert exported == api_csv
    assert {(row["period"], row["as_of"]) for row in exported} == {(month, text)}
    # The page's CSV link carries the page's as_of.
    assert f"as_of={text.replace(':', '%3A')}" in page.content.decode()
    # Asked again later, the same instant gives the same numbers.
    again = api_as(fiona).get("/api/chargeback/", {"period": month, "as_of": text}).json()
    assert again == data


def test_usage_after_as_of_does_not_count_even_when_reported_ended_later(example_policy):
    # One H100 Nov 10 08:00 → 12:00, reported ended: as of 10:00 it held 2 hours, not 4.
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        start=datetime(2026, 11, 10, 8, tzinfo=UTC),
        end=datetime(2026, 11, 10, 12, tzinfo=UTC),
    )
    now = datetime(2026, 12, 10, tzinfo=UTC)
    as_of = datetime(2026, 11, 10, 10, tzinfo=UTC)

    report = period_report(month=NOV.date(), now=now, team_ids=None, as_of=as_of)

    [line] = report.lines
    assert (line.gpu_hours, line.cost, line.provisional) == (D("2.000"), D("9.60"), True)
    assert report.as_of == as_of
    assert period_report(month=NOV.date(), now=now, team_ids=None).totals.cost == {
        "EUR": D("19.20")
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(minutes=st.integers(min_value=0, max_value=30 * 24 * 60))  # November: 30 days
def test_a_statement_as_of_t_counts_each_hold_up_to_t_exactly(example_policy, minutes):
    # Two L4 holds (weight 1, 1.20 EUR): one ended Nov 20, one still open. As of any instant,
    # each counts from its start to the earlier of its end and the instant.
    as_of = NOV + timedelta(minutes=minutes)
    UsageInterval.objects.all().delete()
    starts = (datetime(2026, 11, 3, tzinfo=UTC), datetime(2026, 11, 12, 6, tzinfo=UTC))
    ends = (datetime(2026, 11, 20, tzinfo=UTC), None)
    for start, end in zip(starts, ends, strict=True):
        hold(team="speech", gpu_class="l4", start=start, end=end)
    held = sum(
        (
            max(min(end or as_of, as_of) - start, timedelta(0))
            for start, end in zip(starts, ends, strict=True)
        ),
        timedelta(0),
    )
    hours = D(held.total_seconds()) / 3600

    report = period_report(
        month=NOV.date(), now=DEC + timedelta(days=40), team_ids=None, as_of=as_of
    )

    assert report.totals.gpu_hours == hours.quantize(D("0.001"))
    assert report.totals.cost.get("EUR", D("0.00")) == (hours * D("1.20")).quantize(D("0.01"))


def test_a_closed_month_is_as_of_its_close_by_default(example_policy, fiona, api_as):
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        start=datetime(2026, 11, 10, 8, tzinfo=UTC),
        end=datetime(2026, 11, 10, 12, tzinfo=UTC),
    )
    closed_at = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)
    period_close(month=NOV.date(), by=None, now=closed_at)

    data = api_as(fiona).get("/api/chargeback/", {"period": "2026-11"}).json()
    exported = _csv(_client(fiona).get("/chargeback/", {"month": "2026-11", "format": "csv"}))
    page = _client(fiona).get("/chargeback/", {"month": "2026-11"}).content.decode()

    assert (data["closed"], data["as_of"], data["totals"]["cost"]) == (
        True,
        "2026-12-03T09:30:00Z",
        {"EUR": "19.20"},
    )
    assert {row["as_of"] for row in exported} == {"2026-12-03T09:30:00Z"}
    assert "as_of=2026-12-03T09%3A30%3A00Z" in page
    # As of an instant before the close it is computed, not frozen: 2 of the 4 hours.
    early = api_as(fiona).get(
        "/api/chargeback/", {"period": "2026-11", "as_of": "2026-11-10T10:00:00Z"}
    )
    assert (early.json()["closed"], early.json()["totals"]["cost"]) == (False, {"EUR": "9.60"})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", "expected a date (2026-11-01) or an ISO 8601 date-time"),
        ("2026-13-01", "expected a date (2026-11-01) or an ISO 8601 date-time"),
        ("", "must not be empty"),
        ("9999-01-01", "expected a date (2026-11-01) or an ISO 8601 date-time"),
    ],
)
def test_a_bad_as_of_is_a_400_naming_it(example_policy, fiona, api_as, value, message):
    response = api_as(fiona).get("/api/chargeback/", {"period": "2026-11", "as_of": value})

    assert response.status_code == 400
    assert message in str(response.json()["as_of"])


def test_an_as_of_in_the_future_is_refused_on_the_api_and_the_page(example_policy, fiona, api_as):
    future = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")

    response = api_as(fiona).get("/api/chargeback/", {"as_of": future})
    page = _client(fiona).get("/chargeback/", {"as_of": future})
    csv_page = _client(fiona).get("/chargeback/", {"as_of": future, "format": "csv"})
    garbled = _client(fiona).get("/chargeback/", {"as_of": "soon"})

    assert response.status_code == 400
    assert "is in the future" in response.json()["as_of"][0]
    assert page.status_code == csv_page.status_code == garbled.status_code == 400
    assert "as_of: " in page.content.decode() and "is in the future" in page.content.decode()
    assert "as_of: expected a date" in garbled.content.decode()


def test_a_range_is_as_of_its_instant_too(example_policy, fiona, api_as):
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        start=datetime(2026, 11, 10, 8, tzinfo=UTC),
        end=datetime(2026, 11, 10, 12, tzinfo=UTC),
    )
    data = (
        api_as(fiona)
        .get(
            "/api/chargeback/",
            {"start": "2026-11-01", "end": "2026-12-01", "as_of": "2026-11-10T09:00:00Z"},
        )
        .json()
    )
    exported = _csv(
        api_as(fiona).get(
            "/api/chargeback/",
            {
                "start": "2026-11-01",
                "end": "2026-12-01",
                "as_of": "2026-11-10T09:00:00Z",
                "format": "csv",
            },
        )
    )

    assert (data["as_of"], data["totals"]["cost"]) == ("2026-11-10T09:00:00Z", {"EUR": "4.80"})
    assert {row["period"] for row in exported} == {"2026-11-01T00:00:00Z/2026-12-01T00:00:00Z"}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(
        st.text(max_size=40),
        st.datetimes(
            min_value=datetime(1960, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
        ).map(lambda d: d.isoformat()),
    )
)
def test_no_as_of_is_a_server_error(example_policy, fiona, api_as, value):
    client = _client(fiona)
    api = api_as(fiona)
    for response in (
        api.get("/api/chargeback/", {"period": "2026-11", "as_of": value}),
        api.get("/api/chargeback/", {"as_of": value, "format": "csv"}),
        client.get("/chargeback/", {"month": "2026-11", "as_of": value}),
    ):
        assert response.status_code in (200, 400), (value, response.status_code)
