"""Closing periods: frozen lines, adjustments for late usage, order and idempotence."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from chargeback.models import FrozenLine, Period
from chargeback.selectors import period_report
from chargeback.services import PeriodRefused, parse_month, period_close
from tests.chargeback.helpers import hold

pytestmark = pytest.mark.django_db
D = Decimal
DEC_15 = datetime(2026, 12, 15, tzinfo=UTC)


def test_closing_freezes_the_lines_and_a_late_interval_becomes_an_adjustment(example_policy):
    # 1 L4 (weight 1, 1.20 EUR) for 10 h in November.
    hold(
        team="vision",
        gpu_class="l4",
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 2, 10, tzinfo=UTC),
    )
    period, closed = period_close(month=date(2026, 11, 1), by=None, now=DEC_15)
    # Reported after the close: 2 × H100 (weight 4) for 3 h on Nov 20.
    hold(
        team="nlp",
        gpu_class="h100-80gb",
        devices=2,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        end=datetime(2026, 11, 20, 3, tzinfo=UTC),
    )

    november = period_report(month=date(2026, 11, 1), now=DEC_15, team_ids=None)
    december = period_report(month=date(2026, 12, 1), now=DEC_15, team_ids=None)

    assert closed and november.closed
    # The closed month did not change: 10 GPU-hours × 1 × 1.20 = 12.00 EUR.
    assert [(x.key["team"], x.gpu_hours, x.cost) for x in november.lines] == [
        ("vision", D("10.000"), D("12.00"))
    ]
    assert november.totals.cost == {"EUR": D("12.00")}
    # The late use, in the first open month, apart: 6 GPU-hours × 4 = 24 × 1.20 = 28.80 EUR.
    assert december.lines == []
    [adjustment] = december.adjustments
    assert (adjustment.month, adjustment.line.key["team"], adjustment.line.gpu_hours) == (
        date(2026, 11, 1),
        "nlp",
        D("6.000"),
    )
    assert (adjustment.line.normalized_gpu_hours, adjustment.line.cost) == (D("24.000"), D("28.80"))

    # Closing December stores the adjustment, naming November; nothing is pending after.
    period_close(month=date(2026, 12, 1), by=None, now=datetime(2027, 1, 5, tzinfo=UTC))
    stored = FrozenLine.objects.get(adjustment_for=period)
    assert (stored.period.month, stored.cost, stored.gpu_hours) == (
        date(2026, 12, 1),
        D("28.80"),
        D("6.000"),
    )
    january = period_report(
        month=date(2027, 1, 1), now=datetime(2027, 1, 5, tzinfo=UTC), team_ids=None
    )
    assert january.adjustments == []


def test_closing_again_changes_nothing(example_policy):
    hold(
        team="vision",
        gpu_class="l4",
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 2, 10, tzinfo=UTC),
    )
    first, closed = period_close(month=date(2026, 11, 1), by=None, now=DEC_15)
    again, closed_again = period_close(month=date(2026, 11, 1), by=None, now=DEC_15)

    assert (closed, closed_again, first.pk) == (True, False, again.pk)
    assert FrozenLine.objects.count() == 1


def test_closing_out_of_order_or_too_early_is_refused(example_policy):
    period_close(month=date(2026, 9, 1), by=None, now=DEC_15)

    with pytest.raises(PeriodRefused, match="2026-10 must be closed before 2026-11"):
        period_close(month=date(2026, 11, 1), by=None, now=DEC_15)
    with pytest.raises(PeriodRefused, match="2026-08 comes before 2026-09"):
        period_close(month=date(2026, 8, 1), by=None, now=DEC_15)
    with pytest.raises(PeriodRefused, match="2026-12 has not ended yet"):
        period_close(month=date(2026, 12, 1), by=None, now=DEC_15)
    assert list(Period.objects.values_list("month", flat=True)) == [date(2026, 9, 1)]


def test_the_command_closes_once_and_names_bad_input(example_policy, capsys):
    call_command("close_period", "2025-11")
    call_command("close_period", "2025-11")

    out = capsys.readouterr().out
    assert "closed 2025-11: 0 lines stored" in out
    assert "2025-11 was closed already" in out
    with pytest.raises(CommandError, match="'2025-13' is not a month"):
        call_command("close_period", "2025-13")


def test_parse_month():
    assert parse_month("2026-11") == date(2026, 11, 1)
    with pytest.raises(ValueError, match="YYYY-MM"):
        parse_month("Nov 2026")


def test_beat_closes_last_month_once_the_grace_has_passed(example_policy, settings):
    from django.utils import timezone

    from chargeback.tasks import close_previous_period

    now = timezone.now()
    previous = (now.replace(day=1) - timedelta(days=1)).date().replace(day=1)
    settings.CHARGEBACK_CLOSE_GRACE_HOURS = 24 * 40  # not over yet
    assert close_previous_period() == "grace period"
    settings.CHARGEBACK_CLOSE_GRACE_HOURS = 0

    assert close_previous_period() == f"closed {previous:%Y-%m}"
    assert close_previous_period() == f"{previous:%Y-%m} closed already"


def test_an_admin_reopens_the_latest_closed_month_with_a_reason_audited(
    example_policy, ada, client
):
    from auditlog.models import LogEntry

    from chargeback.models import Reopening
    from chargeback.services import period_reopen

    # 1 L4 for 10 h in November: 12.00 EUR, closed Dec 15.
    hold(
        team="vision",
        gpu_class="l4",
        start=datetime(2026, 11, 2, tzinfo=UTC),
        end=datetime(2026, 11, 2, 10, tzinfo=UTC),
    )
    period_close(month=date(2026, 10, 1), by=None, now=DEC_15)
    period_close(month=date(2026, 11, 1), by=None, now=DEC_15)

    with pytest.raises(PeriodRefused, match="reason: say why the month is reopened"):
        period_reopen(month=date(2026, 11, 1), by=ada, reason="  ", now=DEC_15)
    with pytest.raises(PeriodRefused, match="reopen 2026-11 first"):
        period_reopen(month=date(2026, 10, 1), by=ada, reason="x", now=DEC_15)
    with pytest.raises(PeriodRefused, match="2026-12 is not closed"):
        period_reopen(month=date(2026, 12, 1), by=ada, reason="x", now=DEC_15)
    assert Period.objects.count() == 2 and not Reopening.objects.exists()

    reopening = period_reopen(
        month=date(2026, 11, 1), by=ada, reason="Rate card typo fixed", now=DEC_15
    )

    assert not Period.objects.filter(month=date(2026, 11, 1)).exists()
    assert reopening.frozen == [
        {
            "team": "vision",
            "cost_center": reopening.frozen[0]["cost_center"],
            "gpu_class": "l4",
            "sharing_mode": "exclusive",
            "adjustment_for": None,
            "currency": "EUR",
            "device_hours": "10.000",
            "gpu_hours": "10.000",
            "normalized_gpu_hours": "10.000",
            "cost": "12.00",
        }
    ]
    (entry,) = LogEntry.objects.get_for_object(reopening)
    assert (entry.actor, entry.changes_dict["reason"]) == (ada, [None, "Rate card typo fixed"])
    # Usage reported now counts in November itself (it is open), not as an adjustment.
    hold(
        team="nlp",
        gpu_class="l4",
        start=datetime(2026, 11, 20, tzinfo=UTC),
        end=datetime(2026, 11, 20, 5, tzinfo=UTC),
    )
    november = period_report(month=date(2026, 11, 1), now=DEC_15, team_ids=None)
    assert not november.closed and november.totals.cost == {"EUR": D("18.00")}
    assert period_report(month=date(2026, 12, 1), now=DEC_15, team_ids=None).adjustments == []

    # Finance sees the reopening, its reason and what it changes; closed again, it shows both.
    period_close(month=date(2026, 11, 1), by=None, now=DEC_15 + timedelta(hours=1))
    client.force_login(ada)
    page = client.get("/chargeback/", {"month": "2026-11"}).content.decode()
    assert "Rate card typo fixed" in page
    assert "Frozen then: 12.00 EUR; closed again: 18.00 EUR." in page
    assert "<td>nlp</td><td>" in page and "+6.00 EUR" in page


def test_reopening_is_an_admins_and_says_why_it_is_refused(example_policy, ada, fiona, client):
    period_close(month=date(2026, 11, 1), by=None, now=DEC_15)
    client.force_login(fiona)
    assert client.post("/chargeback/reopen", {"month": "2026-11", "reason": "x"}).status_code == 404
    assert 'data-testid="reopen"' not in client.get("/chargeback/?month=2026-11").content.decode()
    client.force_login(ada)
    assert 'data-testid="reopen"' in client.get("/chargeback/?month=2026-11").content.decode()

    response = client.post("/chargeback/reopen", {"month": "2026-11", "reason": ""}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        "Not reopened: reason: say why the month is reopened — finance reads it"
    ]
    response = client.post("/chargeback/reopen", {"month": "2026-13", "reason": "x"}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        "Not reopened: month: '2026-13' is not a month: write it as YYYY-MM, e.g. 2026-11"
    ]
    response = client.post(
        "/chargeback/reopen", {"month": "2026-11", "reason": "bad\u202eevil"}, follow=True
    )
    assert str(next(iter(response.context["messages"]))).startswith("Not reopened: reason: ")
    assert Period.objects.filter(month=date(2026, 11, 1)).exists()

    response = client.post(
        "/chargeback/reopen", {"month": "2026-11", "reason": "late pods"}, follow=True
    )
    assert not Period.objects.exists()
    assert str(next(iter(response.context["messages"]))).startswith("Reopened 2026-11")
