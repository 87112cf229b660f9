"""What every model of the app shares: the name rules, GPU amounts, the default grace period and
the active-flag queryset."""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.validators import RegexValidator
from django.db import models

# The one rule for a policy object's name (a DNS subdomain, as Kubernetes labels take it). Match
# it on the whole string (``NAME.fullmatch``): with ``re.match`` and ``$``, "gpu\n" would pass.
NAME_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?"


NAME = re.compile(NAME_PATTERN)


NAME_VALIDATOR = RegexValidator(
    rf"\A{NAME_PATTERN}\Z",
    "Use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.",
)


# A Kubernetes namespace is a DNS-1123 label: no dots.
NAMESPACE_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"


NAMESPACE_VALIDATOR = RegexValidator(
    rf"\A{NAMESPACE_PATTERN}\Z",
    "A namespace is a DNS label: lowercase letters, digits and '-', at most 63 characters.",
)


def gpu_amount_field(**kwargs: object) -> models.DecimalField:
    """A count of GPU-equivalents (three decimals: 1/7 of a GPU is stored as 0.143)."""
    return models.DecimalField(max_digits=10, decimal_places=3, **kwargs)  # type: ignore[arg-type]


# Kubernetes' default terminationGracePeriodSeconds: what pods get to stop unless a queue says.
DEFAULT_TERMINATION_GRACE = timedelta(seconds=30)


class ActiveQuerySet(models.QuerySet):
    def active(self) -> ActiveQuerySet:
        """Objects offered for new submissions (pruned-but-referenced ones are inactive)."""
        return self.filter(active=True)
