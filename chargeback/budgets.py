"""Budgets against spend: each team's and cost center's budget for a month (the policy's
``budgets``, ``queues.models.Budget``) beside what the month's statement bills it so far and what
the forecast says it will be at the month's end. At ``WARN_PERCENT`` and ``OVER_PERCENT`` of the
budget — reached by the spend or by the forecast — the page shows a banner to finance and to the
team's members, and ``/metrics`` exports the spend and the amount for alerting. When the spend
itself reaches the amount, ``budget_overruns_record`` notes it once per budget and month, and
admins and finance are told (queues' notifications read those rows)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from chargeback.forecast import Forecast
from chargeback.models import Period, month_end, month_start
from chargeback.statements import Line, statement
from portal.formatting import money_text
from queues.models import Budget, BudgetOverrun, BudgetScope, Team

METRICS_PREFIX = "gpuportal"
WARN_PERCENT = Decimal(80)
OVER_PERCENT = Decimal(100)


@dataclass(frozen=True)
class BudgetStatus:
    scope: str  # "team" or "cost_center"
    name: str
    month: date
    amount: Decimal
    currency: str
    spent: Decimal
    forecast: Decimal | None  # None once the month is over (or closed)
    teams: tuple[str, ...]  # whose members see it

    @property
    def spent_percent(self) -> Decimal:
        return (self.spent * 100 / self.amount).quantize(Decimal("0.1"))

    @property
    def forecast_percent(self) -> Decimal | None:
        if self.forecast is None:
            return None
        return (self.forecast * 100 / self.amount).quantize(Decimal("0.1"))

    @property
    def level(self) -> int:
        """100 when the spend or the forecast reached the budget, 80 when one reached 80 % of
        it, else 0."""
        highest = max(self.spent_percent, self.forecast_percent or Decimal(0))
        if highest >= OVER_PERCENT:
            return 100
        if highest >= WARN_PERCENT:
            return 80
        return 0

    @property
    def headline(self) -> str:
        """What the banner leads with: which of spend and forecast reached which mark."""
        spent_over = self.spent_percent >= OVER_PERCENT
        if self.level == 100:
            return "Over budget" if spent_over else "Forecast over budget"
        return (
            "80 % of budget spent"
            if self.spent_percent >= WARN_PERCENT
            else ("Forecast past 80 % of budget")
        )

    @property
    def message(self) -> str:
        label = "team" if self.scope == BudgetScope.TEAM else "cost center"
        text = (
            f"{label} {self.name}, {self.month:%Y-%m}: {money_text(self.spent)} {self.currency} "
            f"spent so far ({self.spent_percent} % of its budget of {money_text(self.amount)} "
            f"{self.currency})"
        )
        if self.forecast is not None:
            text += f"; forecast to the month's end {money_text(self.forecast)} {self.currency} "
            text += f"({self.forecast_percent} %)"
        return text


def budgets_for(month: date) -> dict[tuple[str, str], Budget]:
    """The budgets in force in ``month`` by (scope, name): a month's own over the monthly."""
    found: dict[tuple[str, str], Budget] = {}
    for budget in Budget.objects.filter(month__isnull=True) | Budget.objects.filter(month=month):
        key = (budget.scope, budget.name)
        if key not in found or budget.month is not None:
            found[key] = budget
    return found


def budget_statuses(
    *,
    month: date,
    lines: Sequence[Line],
    forecasts: Iterable[Forecast],
    team_ids: list[int] | None,
) -> list[BudgetStatus]:
    """Every budget of ``month`` that ``team_ids`` may see (None: all) against the spend of
    ``lines`` (the month's statement lines, in the budget's currency) and the month-end
    forecasts (the forecast's remaining parts added to a cost center's spend by its teams'
    current cost center). A member sees a cost center's budget only when every team in it is
    theirs (its spend would tell them other teams')."""
    budgets = budgets_for(month)
    if not budgets:
        return []
    centers = dict(Team.objects.values_list("name", "cost_center"))
    visible = (
        set(centers)
        if team_ids is None
        else set(Team.objects.filter(pk__in=team_ids).values_list("name", flat=True))
    )
    ahead = {f.team: f.total - f.so_far for f in forecasts}
    forecasting = bool(ahead)
    statuses = []
    for (scope, name), budget in sorted(budgets.items()):
        members_of: tuple[str, ...]
        if scope == BudgetScope.TEAM:
            members_of = (name,) if name in centers else ()
            spent = _spent(lines, budget.currency, team=name)
        else:
            members_of = tuple(sorted(t for t, c in centers.items() if c == name))
            spent = _spent(lines, budget.currency, cost_center=name)
        if not members_of or not set(members_of) <= visible:
            # Not the viewer's: a member sees a cost center's only when all its teams are theirs
            continue
        forecast = None
        if forecasting:
            forecast = spent + sum((ahead.get(t, Decimal(0)) for t in members_of), Decimal(0))
        statuses.append(
            BudgetStatus(
                scope=scope,
                name=name,
                month=month,
                amount=budget.amount,
                currency=budget.currency,
                spent=spent,
                forecast=forecast,
                teams=members_of,
            )
        )
    return statuses


def _spent(
    lines: Sequence[Line], currency: str, *, team: str = "", cost_center: str = ""
) -> Decimal:
    total = Decimal("0.00")
    for line in lines:
        if line.cost is None or line.currency != currency:
            continue
        if (team and line.key.get("team") == team) or (
            cost_center and line.key.get("cost_center") == cost_center
        ):
            total += line.cost
    return total


def budget_overruns_record(*, now: datetime) -> int:
    """Note each budget whose month's spend (the statement's cost as of ``now``, in the budget's
    currency) reached its amount, with the numbers then: once per budget and month (the rows'
    unique key), so a check every few minutes tells of a crossing once, not at every check.
    Checks this month, and last month while it is not closed (late usage still lands in it).
    Returns how many rows are new."""
    this_month = now.date().replace(day=1)
    months = [this_month]
    previous = (this_month - timedelta(days=1)).replace(day=1)
    if not Period.objects.filter(month=previous).exists():
        months.append(previous)
    made = 0
    for month in months:
        budgets = budgets_for(month)
        known = set(BudgetOverrun.objects.filter(month=month).values_list("scope", "name"))
        if not set(budgets) - known:
            continue  # none, or every one already past: no statement to compute
        lines = statement(start=month_start(month), end=month_end(month), now=now).lines
        statuses = budget_statuses(month=month, lines=lines, forecasts=(), team_ids=None)
        rows = [
            BudgetOverrun(
                scope=s.scope,
                name=s.name,
                month=month,
                amount=s.amount,
                spent=s.spent,
                currency=s.currency,
                at=now,
            )
            for s in statuses
            if s.spent >= s.amount and (s.scope, s.name) not in known
        ]
        made += len(BudgetOverrun.objects.bulk_create(rows, ignore_conflicts=True))
    return made


class BudgetCollector(Collector):
    """``/metrics``: this month's budget amount and spend so far per team and cost center
    (``gpuportal_budget_amount``, ``gpuportal_budget_spend``; labels ``scope``, ``name``,
    ``currency``), so an alert can fire at ``spend / amount >= 0.8``. Nothing is computed when no
    budget is set."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        labels = ["scope", "name", "currency"]
        amount = GaugeMetricFamily(
            f"{METRICS_PREFIX}_budget_amount",
            "This month's budget per team or cost center (the policy's budgets).",
            labels=labels,
        )
        spend = GaugeMetricFamily(
            f"{METRICS_PREFIX}_budget_spend",
            "This month's statement cost so far per budgeted team or cost center.",
            labels=labels,
        )
        month = self.now.date().replace(day=1)
        if budgets_for(month):
            lines = statement(start=month_start(month), end=month_end(month), now=self.now).lines
            for status in budget_statuses(month=month, lines=lines, forecasts=(), team_ids=None):
                key = [status.scope, status.name, status.currency]
                amount.add_metric(key, float(status.amount))
                spend.add_metric(key, float(status.spent))
        yield amount
        yield spend
