"""A policy document as YAML text the policy reader accepts (``parse.py`` refuses aliases, so
shared values are written out in full). Imports no Django: benchmarks write policy files before
Django is set up."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import yaml

from portal.formatting import format_datetime, format_duration


class _PolicyDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        # Written out in full: the policy reader refuses aliases (queues/policy/parse.py).
        return True


def _represent_decimal(dumper: yaml.SafeDumper, value: Decimal) -> yaml.Node:
    if value == value.to_integral_value():
        return dumper.represent_int(int(value))
    return dumper.represent_scalar("tag:yaml.org,2002:float", format(value.normalize(), "f"))


def _represent_timedelta(dumper: yaml.SafeDumper, value: timedelta) -> yaml.Node:
    return dumper.represent_str(format_duration(value))


def _represent_datetime(dumper: yaml.SafeDumper, value: datetime) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:timestamp", format_datetime(value))


_PolicyDumper.add_representer(Decimal, _represent_decimal)
_PolicyDumper.add_representer(timedelta, _represent_timedelta)
_PolicyDumper.add_representer(datetime, _represent_datetime)


def policy_yaml(document: Mapping[str, Any]) -> str:
    """A policy document (plain dicts and lists, as a file holds them) as YAML the policy
    reader accepts: shared values written out in full, never as aliases."""
    return yaml.dump(
        document,
        Dumper=_PolicyDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=None,
    )
