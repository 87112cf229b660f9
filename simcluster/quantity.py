"""Kubernetes resource quantities (``500m``, ``16Gi``, ``4``), parsed exactly.

The scheduler works in integer *milli-units* (``500m`` CPU is 500, ``1Gi`` is 1073741824000),
rounded up as Kubernetes rounds a quantity's milli-value: exact sums, no float drift (``0.1 +
0.2`` CPUs never squeeze onto a node with ``300m`` left), and fast integer arithmetic.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

# The API server's own pattern for a quantity (sign, digits, optional fraction, suffix).
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]|)$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}

QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_quantity(value: Any) -> Fraction:
    """``"500m"`` → 1/2, ``"1Gi"`` → 1073741824, ``4`` → 4. Raises :class:`QuantityError`."""
    if isinstance(value, bool):
        raise QuantityError(QUANTITY_MESSAGE)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(QUANTITY_MESSAGE)
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(QUANTITY_MESSAGE)
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def milli(value: Any) -> int:
    """A quantity in milli-units, rounded up: ``"500m"`` → 500, ``2`` → 2000."""
    return math.ceil(parse_quantity(value) * 1000)


def parse_resources(values: dict[str, Any] | None) -> dict[str, int]:
    """A resource list (``{"cpu": "2", "nvidia.com/gpu": 1}``) in milli-units."""
    return {name: milli(amount) for name, amount in (values or {}).items()}


def format_milli(amount: int) -> str:
    """Milli-units back to a plain decimal: 4000 → ``4``, 500 → ``0.5``."""
    value = Fraction(amount, 1000)
    if value.denominator == 1:
        return str(value.numerator)
    return format(float(value), "g")
