"""python manage.py close_period 2026-11 — freeze a month's statement (idempotent)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from chargeback.services import PeriodRefused, parse_month, period_close


class Command(BaseCommand):
    help = "Close a month: store its statement and the adjustments to earlier closed months."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("month", help="the month to close, YYYY-MM")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            month = parse_month(options["month"])
            period, closed = period_close(month=month, by=None, now=timezone.now())
        except (ValueError, PeriodRefused) as exc:
            raise CommandError(str(exc)) from exc
        lines = period.lines.count()
        if closed:
            self.stdout.write(f"closed {period}: {lines} lines stored")
        else:
            self.stdout.write(f"{period} was closed already ({lines} lines); nothing changed")
