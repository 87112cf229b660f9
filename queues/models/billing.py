"""Rate cards (what a GPU-hour of each class is worth) and budgets."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import models
from django.db.models import Q

from portal.formatting import format_datetime
from queues.models.policy import GpuClass
from queues.rates import CardTerms


class RateCardQuerySet(models.QuerySet["RateCard"]):
    def in_force(self, at: datetime) -> RateCard | None:
        """The rate card in force at ``at``: the latest whose ``effective_from`` is not after it."""
        return self.filter(effective_from__lte=at).order_by("-effective_from").first()

    def terms(self) -> list[CardTerms]:
        """Every card as the rating rule takes them (queues.rates.rate_interval), oldest first;
        two queries. A card's version is its ``effective_from`` as the policy file keys it."""
        weights: dict[int, dict[str, Decimal]] = {}
        for card_id, class_name, weight in RateCardWeight.objects.filter(
            rate_card__in=self
        ).values_list("rate_card_id", "gpu_class__name", "weight"):
            weights.setdefault(card_id, {})[class_name] = weight
        return [
            CardTerms(
                effective_from=card.effective_from,
                weights=weights.get(card.pk, {}),
                price=card.price_per_normalized_gpu_hour,
                currency=card.currency,
                version=card.version,
            )
            for card in self.order_by("effective_from")
        ]


class BudgetScope(models.TextChoices):
    TEAM = "team", "team"
    COST_CENTER = "cost_center", "cost center"


class Budget(models.Model):
    """A monthly budget of a team or a cost center (the policy's ``budgets`` section): every
    month (``month`` empty), or one month, which takes precedence over the monthly one. The
    policy apply replaces all rows when the file has the section."""

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    name = models.CharField(max_length=64, help_text="The team's name or the cost center.")
    month = models.DateField(null=True, blank=True, help_text="Its first day; empty: every month.")
    amount = models.DecimalField(max_digits=18, decimal_places=2)
    currency = models.CharField(max_length=3)

    class Meta:
        ordering = ["scope", "name", "month"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name", "month"], name="budget_unique"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="budget_positive"),
        ]

    def __str__(self) -> str:
        when = f"{self.month:%Y-%m}" if self.month else "monthly"
        return f"{self.scope} {self.name} {when}: {self.amount} {self.currency}"


class RateCard(models.Model):
    """Price per normalized GPU-hour from ``effective_from`` until the next card takes over.

    Effective-dated and never rewritten (bills already computed depend on it). The weights per
    GPU class live only here: fair share and chargeback both read them."""

    effective_from = models.DateTimeField(unique=True)
    currency = models.CharField(max_length=3)
    price_per_normalized_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)
    note = models.CharField(max_length=200, blank=True)

    objects = RateCardQuerySet.as_manager()

    class Meta:
        ordering = ["-effective_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(price_per_normalized_gpu_hour__gte=0),
                name="rate_card_price_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="rate_card_currency_iso_code"
            ),
        ]

    def __str__(self) -> str:
        return f"rate card from {self.effective_from:%Y-%m-%d %H:%M} UTC ({self.currency})"

    @property
    def version(self) -> str:
        """How statements name the card: its ``effective_from`` as the policy file keys it."""
        return format_datetime(self.effective_from)


class RateCardWeight(models.Model):
    """A GPU class's billing weight (its accelerator value) on one rate card."""

    rate_card = models.ForeignKey(RateCard, on_delete=models.CASCADE, related_name="weights")
    gpu_class = models.ForeignKey(GpuClass, on_delete=models.PROTECT, related_name="rate_weights")
    weight = models.DecimalField(max_digits=8, decimal_places=3)

    class Meta:
        ordering = ["rate_card", "gpu_class__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["rate_card", "gpu_class"], name="rate_weight_one_per_card_class"
            ),
            models.CheckConstraint(condition=Q(weight__gt=0), name="rate_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class}: ×{self.weight}"
