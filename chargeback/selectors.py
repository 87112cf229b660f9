"""Reads of rate cards for previews and statements."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from chargeback.models import RateCard, RateCardWeight
from chargeback.rating import cost_per_hour, rate


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


@dataclass(frozen=True)
class CostSoFar:
    amount: Decimal
    normalized_gpu_hours: Decimal
    currency: str
    running: bool  # some of its pods still hold GPUs


def job_cost_so_far(job: Any, *, now: datetime) -> CostSoFar | None:
    """What a job's usage intervals have cost up to ``now`` (open ones count until now), each
    rated by the card in force when it started; None before it held any GPU or without a card."""
    from queues.models import UsageInterval

    intervals = list(UsageInterval.objects.filter(job=job))
    if not intervals:
        return None
    # Rate cards are few: read them once, not per interval.
    cards = list(RateCard.objects.order_by("-effective_from").prefetch_related("weights"))
    total = Decimal(0)
    normalized = Decimal(0)
    currency = ""
    for interval in intervals:
        card = next((c for c in cards if c.effective_from <= interval.started_at), None)
        weight = (
            next(
                (w.weight for w in card.weights.all() if w.gpu_class_id == interval.gpu_class_id),
                None,
            )
            if card
            else None
        )
        if card is None or weight is None:
            return None
        rating = rate(
            held=(interval.ended_at or now) - interval.started_at,
            devices=interval.devices,
            share=interval.share,
            weight=weight,
            price=card.price_per_normalized_gpu_hour,
        )
        total += rating.cost
        normalized += rating.normalized_gpu_hours
        currency = card.currency
    return CostSoFar(
        amount=total.quantize(Decimal("0.01")),
        normalized_gpu_hours=normalized.quantize(Decimal("0.001")),
        currency=currency,
        running=any(i.ended_at is None for i in intervals),
    )
