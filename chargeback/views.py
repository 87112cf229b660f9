"""Chargeback pages: thin, they read selectors and render (finance's one write, close, calls a
service)."""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from chargeback import charts
from chargeback.exports import report_csv, view_data, waste_total
from chargeback.forecast import RUN_RATE_DAYS
from chargeback.models import month_end, month_start
from chargeback.selectors import (
    AsOfRefused,
    PeriodReport,
    latest_closed_month,
    month_reopenings,
    monthly_trend,
    months_before,
    own_usage_by_day,
    period_report,
    statement_view,
    team_ids_visible_to,
)
from chargeback.services import (
    PeriodRefused,
    parse_instant,
    parse_month,
    period_close,
    period_close_allowed,
    period_reopen,
)
from chargeback.statements import statement
from portal.formatting import HIDDEN_CHARACTERS, format_datetime, has_hidden_characters
from portal.roles import is_admin, is_finance
from queues.cluster.prometheus import prometheus_from_settings
from queues.models import Job, RateCard, Team, UsageInterval
from queues.rates import rate_interval, round_hours, round_money

MAX_ID = 2**63 - 1


def _month(request: HttpRequest) -> tuple[date | None, str]:
    """The ``month`` parameter (this month when absent), or an error message."""
    text = request.GET.get("month", "")
    if not text:
        return timezone.now().date().replace(day=1), ""
    try:
        return parse_month(text), ""
    except ValueError as exc:
        return None, f"month: {exc}"


def _bad_request(request: HttpRequest, error: str) -> HttpResponse:
    return render(request, "chargeback/error.html", {"error": error}, status=400)


def _as_of(request: HttpRequest, now: datetime) -> tuple[datetime | None, str]:
    """The ``as_of`` parameter (None when absent: the month's default), or an error message."""
    text = request.GET.get("as_of", "").strip()
    if not text:  # (the page's form sends it empty for the default)
        return None, ""
    try:
        value = parse_instant(text)
    except ValueError as exc:
        return None, f"as_of: {exc}"
    if value > now:
        return None, f"as_of: {format_datetime(value)} is in the future"
    return value, ""


@login_required
def report(request: HttpRequest) -> HttpResponse:
    month, error = _month(request)
    if month is None:
        return _bad_request(request, error)
    if request.GET.get("format", "html") not in ("html", "csv"):
        return _bad_request(request, "format: expected html or csv")
    now = timezone.now()
    as_of, error = _as_of(request, now)
    if error:
        return _bad_request(request, error)
    try:
        view = statement_view(
            user=request.user,
            month=month,
            now=now,
            as_of=as_of,
            prometheus=prometheus_from_settings(),
        )
    except AsOfRefused as exc:
        return _bad_request(request, f"as_of: {exc}")
    result = view.report
    if request.GET.get("format") == "csv":
        response = HttpResponse(report_csv(view_data(view)), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="chargeback-{month:%Y-%m}-as-of-'
            f'{result.as_of:%Y%m%dT%H%M%SZ}.csv"'
        )
        return response
    finance = is_finance(request.user)
    team_ids = team_ids_visible_to(request.user)
    splits = view.capacity or []
    # (The trend up to the month as of the same instant as the statement above it.)
    trend = monthly_trend(month=month, now=result.as_of, team_ids=team_ids)
    own = [] if finance else own_usage_by_day(request.user, now=now)
    context: dict[str, Any] = {
        "title": "Chargeback" if finance else "Usage",
        "finance": finance,
        "report": result,
        "view": view,
        "as_of_param": format_datetime(result.as_of),
        "month": month,
        "months": list(reversed(months_before(now.date().replace(day=1), 12))),
        "waste": view.waste,
        "waste_totals": waste_total(view.waste),
        "forecast": view.forecast,
        "run_rate_days": RUN_RATE_DAYS,
        "budgets": view.budgets,
        "banners": [b for b in view.budgets if b.level],
        "capacity": splits,
        "trend": trend,
        "charts": [
            ("by-team", json.loads(charts.normalized_by_team(result.lines))),
            ("trend", json.loads(charts.monthly_trend(trend))),
            *([("capacity", json.loads(charts.capacity(splits)))] if splits else []),
            *([("mine", json.loads(charts.own_usage(own)))] if own else []),
        ],
        "own_usage": own,
        "own_total": sum((d.gpu_hours for d in own), Decimal(0)),
        "may_close": finance and not result.closed and result.end <= now,
        # the latest closed month may be reopened by an admin, with a reason
        "may_reopen": is_admin(request.user)
        and result.closed
        and result.period is not None
        and result.period.month == latest_closed_month(),
        "reopenings": month_reopenings(result) if finance or is_admin(request.user) else [],
    }
    return render(request, "chargeback/report.html", context)


@login_required
@require_POST
def reopen(request: HttpRequest) -> HttpResponse:
    """An admin reopens the latest closed month with a reason (audited): its frozen statement is
    kept with the reopening, and the month is computed again until it is closed again."""
    if not is_admin(request.user):
        raise Http404
    try:
        month = parse_month(request.POST.get("month", ""))
    except ValueError as exc:
        messages.error(request, f"Not reopened: month: {exc}")
        return redirect("/chargeback/")
    reason = request.POST.get("reason", "")
    if has_hidden_characters(reason, line_breaks=True):
        messages.error(request, f"Not reopened: reason: {HIDDEN_CHARACTERS}")
    else:
        try:
            period_reopen(month=month, by=request.user, reason=reason[:4000], now=timezone.now())
        except PeriodRefused as exc:
            messages.error(request, f"Not reopened: {exc}")
        else:
            messages.success(
                request,
                f"Reopened {month:%Y-%m}: its statement is computed again until it is closed "
                "again; what had been frozen is kept below.",
            )
    return redirect(f"/chargeback/?month={month:%Y-%m}")


@login_required
def close(request: HttpRequest) -> HttpResponse:
    """Closing a month freezes its statement for good: GET shows what would be frozen (the
    totals, the lines still provisional, the adjustments recorded for earlier months); the POST
    closes only if those totals are still the ones shown (``confirm``), else shows them again."""
    if not is_finance(request.user):
        raise Http404
    data = request.POST if request.method == "POST" else request.GET
    try:
        month = parse_month(data.get("month", ""))
    except ValueError as exc:
        messages.error(request, f"Not closed: {exc}")
        return redirect("/chargeback/")
    back = redirect(f"/chargeback/?month={month:%Y-%m}")
    now = timezone.now()
    preview = period_report(month=month, now=now, team_ids=None)
    if preview.closed:
        messages.info(request, f"{month:%Y-%m} was closed already.")
        return back
    fingerprint = _totals_fingerprint(preview)
    changed = False
    if request.method == "POST":
        if data.get("confirm") == fingerprint:
            try:
                period, closed = period_close(month=month, by=request.user, now=now)
            except PeriodRefused as exc:
                messages.error(request, f"Not closed: {exc}")
            else:
                messages.success(
                    request, f"Closed {period}." if closed else f"{period} was closed already."
                )
            return back
        changed = True  # usage came in since the totals were shown: show them again
    return render(
        request,
        "chargeback/close.html",
        {
            "report": preview,
            "month": month,
            "fingerprint": fingerprint,
            "changed": changed,
            "provisional": [line for line in preview.lines if line.provisional],
            "refused": _close_refusal(month, now),
        },
    )


def _totals_fingerprint(report: PeriodReport) -> str:
    """What the closing person saw: the lines and adjustments, as rounded."""
    seen = [
        (line.key, line.gpu_hours, line.normalized_gpu_hours, line.cost) for line in report.lines
    ] + [(a.period_id, a.line.key, a.line.cost) for a in report.adjustments]
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]


def _close_refusal(month: date, now: datetime) -> str:
    """Why the month cannot be closed now (empty: it can), said before anyone confirms."""
    try:
        period_close_allowed(month=month, now=now)
    except PeriodRefused as exc:
        return str(exc)
    return ""


def _visible_team(request: HttpRequest, name: str) -> Team:
    team = Team.objects.filter(name=name).first()
    team_ids = team_ids_visible_to(request.user)
    if team is None or (team_ids is not None and team.pk not in team_ids):
        raise Http404("no such team")  # another team's existence is not a member's business
    return team


@login_required
def team(request: HttpRequest, name: str) -> HttpResponse:
    """A team's month, per job (the same rule and rounding as the statement)."""
    team = _visible_team(request, name)
    month, error = _month(request)
    if month is None:
        return _bad_request(request, error)
    now = timezone.now()
    result = statement(
        start=month_start(month),
        end=month_end(month),
        now=now,
        group_by=("job", "gpu_class", "sharing_mode"),
        team_ids=[team.pk],
    )
    jobs = Job.objects.in_bulk([line.key["job"] for line in result.lines])
    rows = [(line, jobs.get(line.key["job"])) for line in result.lines]
    return render(
        request,
        "chargeback/team.html",
        {"team": team, "month": month, "rows": rows, "totals": result.totals},
    )


@login_required
def job(request: HttpRequest, job_id: int) -> HttpResponse:
    """A job's usage intervals in a month, each rated by the rule, part by part."""
    month, error = _month(request)
    if month is None:
        return _bad_request(request, error)
    if job_id > MAX_ID:  # no row has it; the database would refuse the number
        raise Http404("no such job")
    the_job = Job.objects.select_related("team").filter(pk=job_id).first()
    if the_job is None:
        raise Http404("no such job")
    _visible_team(request, the_job.team.name)
    now = timezone.now()
    cards = RateCard.objects.all().terms()
    rows = []
    for interval in UsageInterval.objects.filter(job=the_job).select_related("gpu_class"):
        for part in rate_interval(
            start=interval.started_at,
            end=max(interval.ended_at or now, interval.started_at),
            devices=interval.devices,
            share=interval.share,
            gpu_class=interval.gpu_class.name,
            cards=cards,
            window_start=month_start(month),
            window_end=month_end(month),
        ):
            rows.append(
                {
                    "interval": interval,
                    "part": part,
                    "device_hours": round_hours(part.device_hours),
                    "gpu_hours": round_hours(part.gpu_hours),
                    "normalized": None
                    if part.normalized_gpu_hours is None
                    else round_hours(part.normalized_gpu_hours),
                    "cost": None if part.cost is None else round_money(part.cost),
                }
            )
    return render(request, "chargeback/job.html", {"job": the_job, "month": month, "rows": rows})
