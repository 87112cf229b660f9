"""What held GPUs are worth: the GPU-hour arithmetic fair share, previews, job pages and
chargeback all use, in Decimal, with no database (docs/chargeback.md).

    device_hours         = hours × devices held
    gpu_hours            = device_hours × share per device   (whole GPU 1; MIG slice its share;
                                                              time-slice replica 1/replicas)
    normalized_gpu_hours = gpu_hours × class weight
    cost                 = normalized_gpu_hours × price per normalized GPU-hour

Values keep full precision here; statements round once, at the line, by their documented rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

SECONDS_PER_HOUR = Decimal(3600)


def share_as_decimal(share: Fraction | Decimal | int) -> Decimal:
    """A device's share of a GPU as Decimal (1/7 → 0.142857142857…, to Decimal's precision)."""
    if isinstance(share, Fraction):
        return Decimal(share.numerator) / Decimal(share.denominator)
    return Decimal(share)


@dataclass(frozen=True)
class Rating:
    device_hours: Decimal
    gpu_hours: Decimal
    normalized_gpu_hours: Decimal
    cost: Decimal


def rate(
    *,
    held: timedelta,
    devices: int,
    share: Fraction | Decimal | int,
    weight: Decimal,
    price: Decimal,
) -> Rating:
    """Rate ``devices`` devices of ``share`` held for ``held`` at ``weight`` and ``price``."""
    hours = Decimal(int(held.total_seconds() * 1_000_000)) / 1_000_000 / SECONDS_PER_HOUR
    device_hours = hours * devices
    gpu_hours = device_hours * share_as_decimal(share)
    normalized = gpu_hours * weight
    return Rating(device_hours, gpu_hours, normalized, normalized * price)


def cost_per_hour(
    *, gpu_equivalents: Fraction | Decimal | int, weight: Decimal, price: Decimal
) -> Decimal:
    """What holding ``gpu_equivalents`` of a class costs per hour (the submit preview's figure)."""
    return share_as_decimal(gpu_equivalents) * weight * price


def normalized_gpu_hours(
    *, held: timedelta, devices: int, share: Fraction | Decimal | int, weight: Decimal
) -> Decimal:
    """GPU-hours weighted by the class's value: what fair share counts, and what a bill
    multiplies by the price. The same arithmetic as ``rate``, which it calls."""
    return rate(
        held=held, devices=devices, share=share, weight=weight, price=Decimal(0)
    ).normalized_gpu_hours


# GPU-equivalents are stored and shown to three decimals (1/7 of a GPU is 0.143).
GPU_AMOUNT_PLACES = Decimal("0.001")


def gpu_amount(value: Fraction | Decimal | int) -> Decimal:
    """An amount of GPU-equivalents as stored and shown: three decimals."""
    return share_as_decimal(value).quantize(GPU_AMOUNT_PLACES)


# --- One interval, clipped to a window and split at rate-card changes -----------------------------
#
# Statements must be reproducible to the cent whichever path computes them (this function for a
# job's page and for a few intervals, SQL for a month of them), so the parts below are exact
# rationals (Fraction): time in whole microseconds, shares as fractions, weights and prices as the
# decimals they are stored as. Nothing is rounded until a statement line is, once, by
# ``round_money`` and ``round_hours``.

MICROSECONDS_PER_HOUR = 3_600_000_000
MONEY_QUANTUM = Decimal("0.01")
HOURS_QUANTUM = Decimal("0.001")


@dataclass(frozen=True)
class CardTerms:
    """A rate card as the rating rule needs it: in force from ``effective_from`` until the next
    card's; ``weights`` by GPU class name; ``version`` names it on statements."""

    effective_from: datetime
    weights: Mapping[str, Decimal]
    price: Decimal
    currency: str
    version: str


@dataclass(frozen=True)
class RatedPart:
    """One piece of an interval held under one card (or under none: ``version`` and
    ``currency`` are empty and the normalized hours and cost None when no card was in force or
    it did not weigh the class). Quantities are exact."""

    start: datetime
    end: datetime
    version: str | None
    currency: str
    microseconds: int
    device_hours: Fraction
    gpu_hours: Fraction
    normalized_gpu_hours: Fraction | None
    cost: Fraction | None


def rate_interval(
    *,
    start: datetime,
    end: datetime,
    devices: int,
    share: Fraction,
    gpu_class: str,
    cards: Sequence[CardTerms],
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> list[RatedPart]:
    """Rate ``devices`` devices of ``share`` of ``gpu_class`` held from ``start`` to ``end``,
    clipped to [``window_start``, ``window_end``) and split at every card of ``cards`` that takes
    over inside it. Returns the parts in time order (none when nothing of the hold lies in the
    window). The time before the first card is one part with no version."""
    lo = start if window_start is None else max(start, window_start)
    hi = end if window_end is None else min(end, window_end)
    if hi <= lo:
        return []
    ordered = sorted(cards, key=lambda c: c.effective_from)
    bounds: list[tuple[datetime, CardTerms | None]] = [(lo, None)]
    for terms in ordered:
        if terms.effective_from <= lo:
            bounds[0] = (lo, terms)
        elif terms.effective_from < hi:
            bounds.append((terms.effective_from, terms))
    parts = []
    for index, (part_start, card) in enumerate(bounds):
        part_end = bounds[index + 1][0] if index + 1 < len(bounds) else hi
        microseconds = (part_end - part_start) // timedelta(microseconds=1)
        device_hours = Fraction(microseconds * devices, MICROSECONDS_PER_HOUR)
        gpu_hours = device_hours * share
        weight = card.weights.get(gpu_class) if card is not None else None
        normalized = gpu_hours * Fraction(weight) if weight is not None else None
        cost = (
            normalized * Fraction(card.price)
            if normalized is not None and card is not None
            else None
        )
        parts.append(
            RatedPart(
                start=part_start,
                end=part_end,
                version=card.version if card is not None and weight is not None else None,
                currency=card.currency if card is not None and weight is not None else "",
                microseconds=microseconds,
                device_hours=device_hours,
                gpu_hours=gpu_hours,
                normalized_gpu_hours=normalized,
                cost=cost,
            )
        )
    return parts


def round_half_up(value: Fraction, quantum: Decimal) -> Decimal:
    """``value`` to a multiple of ``quantum``, halves away from zero (ROUND_HALF_UP): the one
    rounding rule of statements, applied once per line."""
    steps = value / Fraction(quantum)
    magnitude = (abs(steps.numerator) * 2 + steps.denominator) // (steps.denominator * 2)
    return (Decimal(magnitude if steps >= 0 else -magnitude) * quantum).quantize(quantum)


def round_money(value: Fraction) -> Decimal:
    return round_half_up(value, MONEY_QUANTUM)


def round_hours(value: Fraction) -> Decimal:
    return round_half_up(value, HOURS_QUANTUM)
