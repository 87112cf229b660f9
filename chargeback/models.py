"""Rate cards: effective-dated, never rewritten. Weights per GPU class live only here."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import models
from django.db.models import Q

from queues.models import GpuClass


class RateCardQuerySet(models.QuerySet):
    def in_force(self, at: datetime) -> RateCard | None:
        """The rate card in force at ``at``: the latest whose ``effective_from`` is not after it."""
        return self.filter(effective_from__lte=at).order_by("-effective_from").first()


class RateCard(models.Model):
    """Price per normalized GPU-hour from ``effective_from`` until the next card takes over."""

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

    def weight_of(self, gpu_class: GpuClass) -> Decimal | None:
        for weight in self.weights.all():
            if weight.gpu_class_id == gpu_class.pk:
                return weight.weight
        return None


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
