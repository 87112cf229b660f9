"""Reads of rate cards for previews and statements."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from chargeback.models import RateCard, RateCardWeight
from chargeback.rating import cost_per_hour


@dataclass(frozen=True)
class HourlyCost:
    amount: Decimal
    currency: str
    weight: Decimal
    price_per_normalized_gpu_hour: Decimal


def hourly_cost(
    *, gpu_class: str, gpu_equivalents: Fraction | Decimal | int, at: datetime
) -> HourlyCost | None:
    """Cost per hour of holding ``gpu_equivalents`` of ``gpu_class`` under the card in force at
    ``at``; None when no card is in force or it does not weigh the class."""
    card = RateCard.objects.in_force(at)
    if card is None:
        return None
    weight = (
        RateCardWeight.objects.filter(rate_card=card, gpu_class__name=gpu_class)
        .values_list("weight", flat=True)
        .first()
    )
    if weight is None:
        return None
    return HourlyCost(
        amount=cost_per_hour(
            gpu_equivalents=gpu_equivalents,
            weight=weight,
            price=card.price_per_normalized_gpu_hour,
        ),
        currency=card.currency,
        weight=weight,
        price_per_normalized_gpu_hour=card.price_per_normalized_gpu_hour,
    )
