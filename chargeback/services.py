"""Writes of chargeback: closing a period (finance's only write)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from chargeback.models import FrozenLine, Period, Reopening, month_end, month_start
from chargeback.selectors import pending_adjustments
from chargeback.statements import Line, statement
from queues.audit import audit_action
from queues.models import GpuClass, Team

MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class PeriodRefused(Exception):
    """A close that must not happen, with the reason in words."""


def parse_month(text: str) -> date:
    """``2026-11`` → 2026-11-01; ValueError with a message naming what is wrong."""
    match = MONTH.match(text.strip())
    if not match or not 1 <= int(match[2]) <= 12 or not 1970 <= int(match[1]) <= 9000:
        raise ValueError(f"{text!r} is not a month: write it as YYYY-MM, e.g. 2026-11")
    return date(int(match[1]), int(match[2]), 1)


INSTANT_EXPECTED = "expected a date (2026-11-01) or an ISO 8601 date-time"


def parse_instant(text: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 date-time (UTC when it names no offset), between
    1970 and 9000; ValueError otherwise."""
    try:
        parsed = parse_datetime(text)
        day = None if parsed else parse_date(text)
    except ValueError:
        parsed = day = None
    if parsed is None and day is None:
        raise ValueError(INSTANT_EXPECTED)
    value = parsed or datetime.combine(day, time(0), tzinfo=UTC)  # type: ignore[arg-type]
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    if not datetime(1970, 1, 1, tzinfo=UTC) <= value <= datetime(9000, 1, 1, tzinfo=UTC):
        raise ValueError(INSTANT_EXPECTED)
    return value.astimezone(UTC)


def next_month(month: date) -> date:
    return month_end(month).date()


def period_close(*, month: date, by: Any | None, now: datetime) -> tuple[Period, bool]:
    """Close ``month``: store its statement's lines and, as adjustments, whatever changed in the
    periods closed before it since they were closed. Returns the period and whether this call
    closed it (closing a closed period again does nothing). Refuses a month that has not ended
    and a month that is not the one after the last closed (periods close in order)."""
    month = month.replace(day=1)
    existing = Period.objects.filter(month=month).first()
    if existing is not None:
        return existing, False
    period_close_allowed(month=month, now=now)
    with transaction.atomic():
        try:
            with transaction.atomic():
                period = Period.objects.create(month=month, closed_at=now, closed_by=by)
        except IntegrityError:  # closed at the same moment by someone else
            return Period.objects.get(month=month), False
        lines = statement(start=month_start(month), end=month_end(month), now=now).lines
        adjustments = pending_adjustments(before=month, now=now)
        teams = dict(Team.objects.values_list("name", "pk"))
        classes = dict(GpuClass.objects.values_list("name", "pk"))
        FrozenLine.objects.bulk_create(
            [_frozen(period, line, teams, classes, None) for line in lines]
            + [_frozen(period, a.line, teams, classes, a.period_id) for a in adjustments]
        )
    return period, True


def period_close_allowed(*, month: date, now: datetime) -> None:
    """Raises ``PeriodRefused`` when ``month`` may not be closed now: it has not ended, or it is
    not the month after the last closed (periods close in order)."""
    if month_end(month) > now:
        raise PeriodRefused(
            f"{month:%Y-%m} has not ended yet: it can be closed from "
            f"{month_end(month):%Y-%m-%d %H:%M} UTC"
        )
    latest = Period.objects.order_by("-month").first()
    if latest is not None and month != next_month(latest.month):
        expected = next_month(latest.month)
        raise PeriodRefused(
            f"periods close in order: the last closed is {latest.month:%Y-%m}, so "
            f"{expected:%Y-%m} must be closed before {month:%Y-%m}"
            if month > expected
            else f"periods close in order: {month:%Y-%m} comes before {latest.month:%Y-%m}, "
            f"which is closed already"
        )


def period_reopen(*, month: date, by: Any, reason: str, now: datetime) -> Reopening:
    """Reopen closed ``month`` (only the latest closed: periods close, and so reopen, in order):
    its frozen lines move, as they were, into a ``Reopening`` with the admin's reason, audited;
    the month is then computed again like any month not closed, shown against what had been
    frozen, until it is closed again. Refuses without a reason, or a month not closed."""
    month = month.replace(day=1)
    reason = reason.strip()
    if not reason:
        raise PeriodRefused("reason: say why the month is reopened — finance reads it")
    with transaction.atomic():
        period = Period.objects.select_for_update().filter(month=month).first()
        if period is None:
            raise PeriodRefused(f"{month:%Y-%m} is not closed: there is nothing to reopen")
        later = Period.objects.filter(month__gt=month).order_by("-month").first()
        if later is not None:
            raise PeriodRefused(
                f"periods reopen from the latest closed: reopen {later.month:%Y-%m} first"
            )
        lines = list(period.lines.select_related("team", "gpu_class", "adjustment_for"))
        reopening = Reopening.objects.create(
            month=month,
            closed_at=period.closed_at,
            closed_by=period.closed_by,
            reopened_at=now,
            reopened_by=by,
            reason=reason,
            frozen=[_frozen_json(line) for line in lines],
        )
        FrozenLine.objects.filter(period=period).delete()
        period.delete()
        audit_action(
            reopening,
            what="reopened month",
            changes={
                "month": (f"{month:%Y-%m} closed {period.closed_at:%Y-%m-%d %H:%M} UTC", "open"),
                "reason": (None, reason),
            },
            actor=by,
        )
    return reopening


def _frozen_json(line: FrozenLine) -> dict[str, Any]:
    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    return {
        "team": line.team.name,
        "cost_center": line.cost_center,
        "gpu_class": line.gpu_class.name,
        "sharing_mode": line.sharing_mode,
        "adjustment_for": f"{line.adjustment_for.month:%Y-%m}" if line.adjustment_for else None,
        "currency": line.currency,
        "device_hours": text(line.device_hours),
        "gpu_hours": text(line.gpu_hours),
        "normalized_gpu_hours": text(line.normalized_gpu_hours),
        "cost": text(line.cost),
    }


def _frozen(
    period: Period,
    line: Line,
    teams: dict[str, int],
    classes: dict[str, int],
    adjustment_for: int | None,
) -> FrozenLine:
    return FrozenLine(
        period=period,
        adjustment_for_id=adjustment_for,
        team_id=teams[line.key["team"]],
        cost_center=line.key["cost_center"],
        gpu_class_id=classes[line.key["gpu_class"]],
        sharing_mode=line.key["sharing_mode"],
        currency=line.currency,
        device_hours=line.device_hours,
        gpu_hours=line.gpu_hours,
        normalized_gpu_hours=line.normalized_gpu_hours,
        cost=line.cost,
        versions=list(line.versions),
    )
