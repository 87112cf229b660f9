"""Budgets against spend: each team's and cost center's budget for a month (the policy's
``budgets``, ``queues.models.Budget``) beside what the month's statement bills it so far and what
the forecast says it will be at the month's end. At ``WARN_PERCENT`` and ``OVER_PERCENT`` of the
budget — reached by the spend or by the forecast — the page shows a banner to finance and to the
team's members, and ``/metrics`` exports the spend and the amount for alerting."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from chargeback.forecast import Forecast
from chargeback.statements import Line
from queues.models import Budget, BudgetScope, Team

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
    def message(self) -> str:
        label = "Team" if self.scope == BudgetScope.TEAM else "Cost center"
        head = f"{label} {self.name}: {self.spent} {self.currency} spent in {self.month:%Y-%m}"
        head += f", {self.spent_percent} % of its budget of {self.amount} {self.currency}"
        if self.forecast is not None:
            head += f"; forecast {self.forecast} {self.currency} ({self.forecast_percent} %)"
        return head


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
