"""A team past its month's budget: chargeback notes it once per budget and month (not at every
check), with the numbers; admins and finance are told by e-mail and webhook, once; members are
never told (not even the team's own)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from chargeback.budgets import budget_overruns_record
from chargeback.models import month_start
from chargeback.services import period_close
from chargeback.tasks import budget_overruns
from queues.models import BudgetOverrun, NotificationDelivery
from queues.notifications.preferences import DEFAULTS, preferences_set
from tests.chargeback.helpers import hold
from tests.queues.notifications.test_notifications import notify

pytestmark = pytest.mark.django_db

EVERYTHING = {choice: True for choice in DEFAULTS}


@pytest.fixture
def last_month():
    """Last month's start (an open month: late usage may still land in it)."""
    this = month_start(timezone.now().date().replace(day=1))
    return month_start((this - timedelta(days=1)).date().replace(day=1))


@pytest.fixture
def staff(people, ada, fiona, receiver):
    for user in (ada, fiona):
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    preferences_set(user=fiona, choices={}, webhook_url=f"{receiver.url}/fiona")
    for name in ("mia", "sara", "outsider"):
        preferences_set(user=people[name], choices=EVERYTHING, webhook_url=f"{receiver.url}/{name}")
    return ada, fiona


def test_a_team_past_its_budget_is_told_to_admins_and_finance_once_with_the_numbers(
    staff, last_month, smtp_server, receiver
):
    # speech's budget is 1500.00 EUR a month; an L4 GPU-hour costs 1.20 EUR.
    # 6 L4s for 200 h: 1440.00 EUR, 96 %: not past it.
    hold(team="speech", gpu_class="l4", devices=6, start=last_month,
         end=last_month + timedelta(hours=200))  # fmt: skip
    assert budget_overruns_record(now=timezone.now()) == 0
    assert notify() == 0

    # 10 h more: 1512.00 EUR, 100.8 %.
    hold(team="speech", gpu_class="l4", devices=6, start=last_month + timedelta(hours=200),
         end=last_month + timedelta(hours=210))  # fmt: skip
    seen = timezone.now()
    assert budget_overruns_record(now=seen) == 1
    # More spend later the same month: still the one crossing.
    hold(team="speech", gpu_class="l4", devices=6, start=last_month + timedelta(hours=210),
         end=last_month + timedelta(hours=220))  # fmt: skip
    assert budget_overruns_record(now=timezone.now()) == 0
    assert budget_overruns() == 0  # the beat task: the same service

    overrun = BudgetOverrun.objects.get()
    assert (overrun.scope, overrun.name, overrun.month, overrun.spent, overrun.amount) == (
        "team",
        "speech",
        last_month.date(),
        Decimal("1512.00"),
        Decimal("1500.00"),
    )

    assert notify() == 3  # ada and fiona by e-mail, fiona by webhook
    assert notify() == 0
    month = f"{last_month:%Y-%m}"
    assert sorted(m["To"] for m in smtp_server.messages) == ["ada@example.org", "fiona@example.org"]
    message = smtp_server.messages[0]
    assert message["Subject"] == f"Team speech is past its budget for {month}"
    assert message.get_content().strip() == (
        f"Team speech is past its budget for {month}: 1,512.00 EUR spent of 1,500.00 EUR "
        f"(100.8 %), seen {seen:%Y-%m-%d %H:%M} UTC."
    )
    [post] = receiver.requests
    assert post.path == "/hook/fiona"
    assert post.json()["events"][0]["details"] == {
        "scope": "team",
        "name": "speech",
        "period": month,
        "spent": "1512.00",
        "budget": "1500.00",
        "currency": "EUR",
        "percent": "100.8",
        "url": "",
    }
    # No member hears of it, whatever they chose.
    assert set(NotificationDelivery.objects.values_list("user__username", flat=True)) == {
        "ada",
        "fiona",
    }


def test_a_closed_month_is_not_checked_again(staff, last_month, fiona):
    hold(team="speech", gpu_class="l4", devices=6, start=last_month,
         end=last_month + timedelta(hours=250))  # fmt: skip
    period_close(month=last_month.date(), by=fiona, now=timezone.now())

    assert budget_overruns_record(now=timezone.now()) == 0
    assert not BudgetOverrun.objects.exists()


def test_a_cost_center_past_its_budget_names_the_cost_center(staff, last_month, smtp_server):
    # CC-2001 (vision and search) has 600.00 EUR a month: search's 2 L4s for 260 h = 624.00.
    hold(team="search", gpu_class="l4", devices=2, start=last_month,
         end=last_month + timedelta(hours=260))  # fmt: skip
    budget_overruns_record(now=timezone.now())

    notify()

    month = f"{last_month:%Y-%m}"
    assert {m["Subject"] for m in smtp_server.messages} == {
        f"Cost center CC-2001 is past its budget for {month}"
    }
    assert "624.00 EUR spent of 600.00 EUR (104.0 %)" in smtp_server.messages[0].get_content()
