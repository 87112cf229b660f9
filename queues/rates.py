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

from dataclasses import dataclass
from datetime import timedelta
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
