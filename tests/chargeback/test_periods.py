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
