"""Celery tasks of chargeback: thin, each calls one service."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from chargeback.budgets import budget_overruns_record
from chargeback.models import month_start
from chargeback.services import PeriodRefused, period_close

logger = logging.getLogger(__name__)


@shared_task(name="chargeback.close_previous_period")
def close_previous_period() -> str:
    """Close last month once CHARGEBACK_CLOSE_GRACE_HOURS have passed since it ended (beat runs
    this every hour; before the grace ends, or once closed, it does nothing)."""
    now = timezone.now()
    this_month = month_start(now.date())
    if now < this_month + timedelta(hours=settings.CHARGEBACK_CLOSE_GRACE_HOURS):
        return "grace period"
    previous = (this_month - timedelta(days=1)).date().replace(day=1)
    try:
        period, closed = period_close(month=previous, by=None, now=now)
    except PeriodRefused as exc:
        logger.warning("not closing %s: %s", f"{previous:%Y-%m}", exc)
        return str(exc)
    return f"closed {period}" if closed else f"{period} closed already"


@shared_task(name="chargeback.budget_overruns", acks_late=True, ignore_result=True)
def budget_overruns() -> int:
    """Note budgets whose month's spend reached their amount (beat runs this every
    ``BUDGET_CHECK_SECONDS``; a budget already noted this month adds nothing)."""
    return budget_overruns_record(now=timezone.now())
