"""The admin side's pages (/manage/) and members' quota requests (/quota-requests/).

Thin: forms check the input's shape, services decide and write, selectors read. A refusal of
the policy service is shown with its numbers and nothing is stored."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.http import PortalRequest
from portal.roles import is_admin
from queues.audit import AuditSource
from queues.catalog.selectors import capacity_by_state
from queues.cluster.adapter import ClusterRejected, ClusterUnreachable, cluster_from_settings
from queues.models import (
    GpuClass,
    MaintenanceState,
    Node,
    Quota,
    QuotaRequest,
    QuotaRequestStatus,
    Reservation,
    Team,
)
from queues.operations.access import admin_required, audit_reader_required
from queues.operations.forms import (
    ApproveForm,
    DeclineForm,
    DrainForm,
    QuotaForm,
    QuotaRequestForm,
    ReservationForm,
)
from queues.operations.selectors import (
    AUDITED_MODELS,
    DrainedJob,
    audit_changes,
    audit_entries,
    drain_impact,
    held_back,
    nodes_by_selector,
    quota_evidence,
    quota_grid,
    quota_requests_for,
    quota_use,
    reservation_impact,
    reservation_timelines,
    timeline_figure,
)
from queues.operations.services import (
    EDITABLE_SECTIONS,
    NodeActionFailed,
    QuotaRequestRefused,
    RequestDecided,
    node_drain,
    node_return,
    policy_object_apply,
    policy_object_text,
    policy_roles_apply,
    policy_roles_text,
    quota_most_nominal,
    quota_request_approve,
    quota_request_decline,
    quota_request_file,
    quota_text,
    quota_update,
    reservation_end,
    reservation_save,
)
from queues.policy.apply import policy_edit
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import PolicyError, no_roles
from queues.rates import gpu_amount

AUDIT_PAGE_SIZE = 50


@admin_required
def manage_home(request: PortalRequest) -> HttpResponse:
    return redirect("operations:quotas")


# --- Quotas ------------------------------------------------------------------------------------


@admin_required
def quota_grid_view(request: PortalRequest) -> HttpResponse:
    pending = QuotaRequest.objects.filter(status=QuotaRequestStatus.PENDING).count()
    return render(
        request,
        "operations/quotas.html",
        {"grid": quota_grid(), "capacity": capacity_by_state(), "pending_requests": pending},
    )


@admin_required
def quota_edit(request: PortalRequest, team: str, gpu_class: str) -> HttpResponse:
    team_obj = get_object_or_404(Team.objects.active(), name=team)
    class_obj = get_object_or_404(GpuClass.objects.active(), name=gpu_class)
    quota = Quota.objects.filter(team=team_obj, gpu_class=class_obj).first()
    initial = {
        "nominal": quota.nominal if quota else 0,
        "borrowing_limit": quota.borrowing_limit if quota else 0,
    }
    form = QuotaForm(request.POST or None, initial=initial)
    problems: list[str] = []
    if request.method == "POST" and form.is_valid():
        nominal, borrowing = form.cleaned_data["nominal"], form.cleaned_data["borrowing_limit"]
        try:
            quota_update(team=team, gpu_class=gpu_class, nominal=nominal, borrowing_limit=borrowing)
        except PolicyError as exc:
            problems = [str(p) for p in exc.problems]
        else:
            messages.success(
                request,
                f"Quota of {team} for {gpu_class} is now {quota_text(nominal, borrowing)}; "
                "the next reconcile admits what now fits.",
            )
            return redirect("operations:quotas")
    held = held_back([team_obj.pk]).get((team_obj.pk, class_obj.name), [])
    return render(
        request,
        "operations/quota_edit.html",
        {
            "form": form,
            "team": team_obj,
            "gpu_class": class_obj,
            "problems": problems,
            # What the admin decides with: use now, the jobs the quota holds back, and the most
            # a nominal quota may be.
            "in_use": gpu_amount(quota_use([team_obj.pk]).get((team_obj.pk, class_obj.pk), 0)),
            "held_back": held,
            "most": quota_most_nominal(policy_current(), team=team, gpu_class=gpu_class),
        },
        status=422 if problems else 200,
    )


# --- Maintenance -------------------------------------------------------------------------------


@admin_required
def maintenance(request: PortalRequest) -> HttpResponse:
    """A drain in two steps, as a reservation: the first POST shows the nodes and the jobs it
    reaches (who is stopped at the deadline, and the work each loses); the second (``confirm``,
    for exactly what was shown) drains. A link may fill the nodes and the reason in (/ops/'s
    advice to drain a node: ``?nodes=…&reason=…``); nothing happens before the admin posts."""
    form = DrainForm(
        request.POST or None,
        initial={
            "nodes": request.GET.get("nodes", "")[:4000],
            "reason": request.GET.get("reason", "")[:300],
        },
    )
    problems: list[str] = []
    impact: list[DrainedJob] | None = None
    drained_nodes: list[Node] = []
    fingerprint = ""
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        nodes = list(
            nodes_by_selector(
                names=data["nodes"],
                rack=data["rack"],
                gpu_class=data["gpu_class"].name if data["gpu_class"] else "",
            )
        )
        unknown = sorted(set(data["nodes"]) - {n.name for n in nodes})
        if unknown:
            form.add_error("nodes", f"unknown node(s): {', '.join(unknown)}")
        elif not nodes:
            form.add_error(None, "No node matches that rack or GPU class.")
        elif request.POST.get("confirm") != (
            fingerprint := _drain_fingerprint(
                nodes, data["reason"], data["until"], data["deadline"]
            )
        ):
            # What is drained and who it reaches, then confirm (a changed form is shown again).
            impact = drain_impact(nodes, deadline=data["deadline"])
            drained_nodes = nodes
        else:
            try:
                cluster = cluster_from_settings()
                try:
                    drained = node_drain(
                        cluster=cluster,
                        nodes=nodes,
                        reason=data["reason"],
                        until=data["until"],
                        deadline=data["deadline"],
                    )
                finally:
                    cluster.close()
            except NodeActionFailed as exc:
                done = f"Drained {', '.join(exc.done)}; " if exc.done else "Nothing drained: "
                problems.append(f"{done}the cluster did not take the drain of {exc}")
            except (ClusterRejected, ClusterUnreachable) as exc:
                problems.append(f"The cluster could not be reached: {exc}")
            else:
                messages.success(request, f"Drained {', '.join(drained)}: no new work goes there.")
                return redirect("operations:maintenance")
    return render(
        request,
        "operations/maintenance.html",
        {
            "form": form,
            "nodes": Node.objects.select_related("gpu_class").order_by("name"),
            "capacity": capacity_by_state(),
            "problems": problems,
            "impact": impact,
            "drained_nodes": drained_nodes,
            "stopped": [d for d in impact or [] if d.stopped],
            "fingerprint": fingerprint,
        },
        status=422 if (problems or form.errors) else 200,
    )


def _drain_fingerprint(
    nodes: list[Node], reason: str, until: datetime | None, deadline: datetime | None
) -> str:
    """What the admin saw before confirming: a drain of anything else is shown again first."""
    seen = (sorted(n.name for n in nodes), reason, until, deadline)
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]


@admin_required
@require_POST
def node_return_view(request: PortalRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    if node.maintenance == MaintenanceState.NONE:
        messages.info(request, f"{name} is in service already.")
        return redirect("operations:maintenance")
    try:
        cluster = cluster_from_settings()
        try:
            node_return(cluster=cluster, nodes=[node])
        finally:
            cluster.close()
    except (NodeActionFailed, ClusterRejected, ClusterUnreachable) as exc:
        messages.error(request, f"The cluster did not take it: {exc}")
    else:
        messages.success(request, f"{name} is back in service.")
    return redirect("operations:maintenance")


# --- Audit log ---------------------------------------------------------------------------------


@audit_reader_required
def audit_log(request: PortalRequest) -> HttpResponse:
    filters = {
        "source": request.GET.get("source", "")
        if request.GET.get("source") in AuditSource.ALL
        else "",
        "model": request.GET.get("model", "") if request.GET.get("model") in AUDITED_MODELS else "",
        "actor": request.GET.get("actor", "")[:150],
        "search": request.GET.get("search", "")[:200],
    }
    page = Paginator(audit_entries(**filters), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [(entry, audit_changes(entry)) for entry in page.object_list]
    return render(
        request,
        "operations/audit.html",
        {
            "page": page,
            "rows": rows,
            "filters": filters,
            "sources": AuditSource.ALL,
            "models": AUDITED_MODELS,
        },
    )


# --- Quota requests ----------------------------------------------------------------------------


@admin_required
def request_list(request: PortalRequest) -> HttpResponse:
    requests = quota_requests_for(request.user)
    return render(
        request,
        "operations/requests.html",
        {
            "pending": requests.filter(status=QuotaRequestStatus.PENDING),
            "decided": requests.exclude(status=QuotaRequestStatus.PENDING)[:50],
        },
    )


def _form_errors_text(form: forms.Form) -> str:
    """A refused form in one line, each problem under its field's name."""
    return "; ".join(
        f"{field}: {' '.join(map(str, errors))}" for field, errors in form.errors.items()
    )


@admin_required
@require_POST
def request_approve(request: PortalRequest, request_id: int) -> HttpResponse:
    quota_request = get_object_or_404(QuotaRequest, pk=request_id)
    form = ApproveForm(
        request.POST
        or {"nominal": quota_request.nominal, "borrowing_limit": quota_request.borrowing_limit}
    )
    if not form.is_valid():
        messages.error(request, "Not approved: " + _form_errors_text(form))
        return redirect("quota_requests:detail", request_id=request_id)
    try:
        quota_request_approve(
            request=quota_request,
            by=request.user,
            now=timezone.now(),
            nominal=form.cleaned_data["nominal"],
            borrowing_limit=form.cleaned_data["borrowing_limit"],
            reason=form.cleaned_data["reason"],
        )
    except QuotaRequestRefused as refused:
        messages.error(request, f"Not approved: {refused.field}: {refused.message}")
    except PolicyError as exc:
        messages.error(request, "Not approved: " + "; ".join(str(p) for p in exc.problems))
    except RequestDecided as exc:
        messages.error(request, str(exc))
    else:
        granted = quota_text(quota_request.granted_nominal, quota_request.granted_borrowing_limit)
        partly = " (less than asked)" if quota_request.partly_granted else ""
        messages.success(
            request,
            f"Approved{partly}: {quota_request.team} now has {granted} of "
            f"{quota_request.gpu_class}.",
        )
    return redirect("quota_requests:detail", request_id=request_id)


@admin_required
@require_POST
def request_decline(request: PortalRequest, request_id: int) -> HttpResponse:
    quota_request = get_object_or_404(QuotaRequest, pk=request_id)
    form = DeclineForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not declined: reason — say why, the member sees it.")
    else:
        try:
            quota_request_decline(
                request=quota_request,
                by=request.user,
                reason=form.cleaned_data["reason"],
                now=timezone.now(),
            )
        except RequestDecided as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Declined quota request {request_id}.")
    return redirect("quota_requests:detail", request_id=request_id)


@login_required
def my_requests(request: PortalRequest) -> HttpResponse:
    return render(
        request,
        "operations/my_requests.html",
        {"requests": quota_requests_for(request.user)[:100]},
    )


@login_required
def request_new(request: PortalRequest) -> HttpResponse:
    # A link from a job held back by quota names the team and class.
    initial = {k: request.GET[k][:63] for k in ("team", "gpu_class") if k in request.GET}
    form = QuotaRequestForm(request.POST or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            filed = quota_request_file(
                by=request.user,
                team=data["team"],
                gpu_class=data["gpu_class"],
                nominal=data["nominal"],
                borrowing_limit=data["borrowing_limit"],
                justification=data["justification"],
                now=timezone.now(),
            )
        except QuotaRequestRefused as refused:
            form.add_error(refused.field, refused.message)
        else:
            messages.success(request, f"Quota request {filed.pk} filed; an admin decides.")
            return redirect("quota_requests:detail", request_id=filed.pk)
    return render(
        request,
        "operations/request_new.html",
        {"form": form, "has_teams": form.fields["team"].queryset.exists()},  # type: ignore[attr-defined]
        status=422 if form.errors else 200,
    )


@login_required
def request_detail(request: PortalRequest, request_id: int) -> HttpResponse:
    quota_request = quota_requests_for(request.user).filter(pk=request_id).first()
    if quota_request is None:
        raise Http404
    now_evidence = None
    if is_admin(request.user) and quota_request.status == QuotaRequestStatus.PENDING:
        now_evidence = quota_evidence(
            team=quota_request.team, gpu_class=quota_request.gpu_class, now=timezone.now()
        )
    return render(
        request,
        "operations/request_detail.html",
        {
            "req": quota_request,
            "evidence": quota_request.evidence,
            "now_evidence": now_evidence,
            "decline_form": DeclineForm(),
            "approve_form": ApproveForm(
                auto_id="approve_%s",
                initial={
                    "nominal": quota_request.nominal,
                    "borrowing_limit": quota_request.borrowing_limit,
                },
            ),
        },
    )


# --- Reservations ------------------------------------------------------------------------------


@admin_required
def reservation_list(request: PortalRequest) -> HttpResponse:
    timelines = reservation_timelines(now=timezone.now())
    return render(
        request,
        "operations/reservations.html",
        {
            "reservations": Reservation.objects.active()
            .select_related("team", "queue", "gpu_class")
            .order_by("gpu_class__name", "starts_at", "name"),
            "charts": [(t, timeline_figure(t)) for t in timelines],
        },
    )


@admin_required
def reservation_edit(request: PortalRequest, name: str | None = None) -> HttpResponse:
    """New or changed reservation in two steps: the first POST shows who is affected (the
    engine's what-if), the second (``confirm``) saves through the policy service."""
    existing = None
    if name is not None:
        existing = get_object_or_404(
            Reservation.objects.active().select_related("team", "queue", "gpu_class"), name=name
        )
    initial = {}
    if existing is not None:
        initial = {
            "name": existing.name,
            "team": existing.team.name,
            "queue": existing.queue.name if existing.queue else None,
            "gpu_class": existing.gpu_class.name,
            "amount": existing.amount,
            "starts_at": existing.starts_at,
            "ends_at": existing.ends_at,
        }
    form = ReservationForm(request.POST or None, initial=initial, editing=existing is not None)
    problems: list[str] = []
    impact = None
    if request.method == "POST" and form.is_valid():
        reservation_name = form.cleaned_data["name"]
        fields = form.policy_fields()
        if existing is None and Reservation.objects.filter(name=reservation_name).exists():
            form.add_error("name", f"a reservation named {reservation_name} exists already")
        else:
            # Save only what was checked: a change after the check is checked again first.
            fingerprint = _fingerprint(reservation_name, fields)
            try:
                if request.POST.get("confirm") == fingerprint:
                    reservation_save(name=reservation_name, fields=fields)
                    messages.success(request, f"Reservation {reservation_name} saved.")
                    return redirect("operations:reservations")
                # The dry run refuses what saving would refuse, before anyone is shown impact.
                policy_edit(sections={"reservations": {reservation_name: fields}}, dry_run=True)
                impact = reservation_impact(
                    name=reservation_name, fields=fields, now=timezone.now()
                )
            except PolicyError as exc:
                problems = [str(p) for p in exc.problems]
    return render(
        request,
        "operations/reservation_edit.html",
        {
            "form": form,
            "existing": existing,
            "problems": problems,
            "impact": impact,
            "fingerprint": _fingerprint(form.cleaned_data["name"], form.policy_fields())
            if impact is not None
            else "",
        },
        status=422 if (problems or form.errors) else 200,
    )


def _fingerprint(name: str, fields: dict[str, Any]) -> str:
    """What the admin saw checked, so that saving something else checks it again."""
    return hashlib.sha256(repr((name, sorted(fields.items()))).encode()).hexdigest()[:16]


@admin_required
@require_POST
def reservation_end_view(request: PortalRequest, name: str) -> HttpResponse:
    try:
        reservation_end(name=name, now=timezone.now())
    except PolicyError as exc:
        messages.error(request, "Not ended: " + "; ".join(str(p) for p in exc.problems))
    else:
        messages.success(request, f"Reservation {name} ended.")
    return redirect("operations:reservations")


# --- Policy objects ------------------------------------------------------------------------------


SECTION_TITLES = {
    "gpu_classes": "GPU classes",
    "capability_classes": "Capability classes",
    "queues": "Queues",
    "teams": "Teams",
    "node_pools": "Node pools",
    "rate_cards": "Rate cards",
}


def _entry_label(section: str, name: str) -> str:
    """How the overview lists an entry: by name; a rate card by when it takes effect."""
    if section != "rate_cards":
        return name
    try:
        effective = datetime.fromisoformat(name.replace("Z", "+00:00"))
    except ValueError:
        return name
    return f"from {effective.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


@admin_required
def policy_overview(request: PortalRequest) -> HttpResponse:
    current = policy_current()
    return render(
        request,
        "operations/policy.html",
        {
            "sections": [
                (s, SECTION_TITLES[s], [(n, _entry_label(s, n)) for n in current.get(s, {})])
                for s in EDITABLE_SECTIONS
            ],
            "roles": (current.get("roles") or no_roles()).items(),
            "team_groups": [(n, t["groups"]) for n, t in current["teams"].items() if t["groups"]],
        },
    )


@admin_required
def policy_roles(request: PortalRequest) -> HttpResponse:
    """The identity-provider groups that give finance and admin, as the policy file's ``roles``
    section: checked (a dry run showing the diff), then applied."""
    # Never cut: a text over the policy's size limit is refused whole (load_policy_text).
    text = request.POST.get("text", "") if request.method == "POST" else ""
    text = text or policy_roles_text()
    problems: list[str] = []
    report = None
    if request.method == "POST":
        saving = request.POST.get("save") == "1"
        try:
            report = policy_roles_apply(text=text, dry_run=not saving)
        except PolicyError as exc:
            problems = [str(p) for p in exc.problems]
        else:
            if saving:
                messages.success(request, f"Saved: {report.render()}")
                return redirect("operations:policy")
    return render(
        request,
        "operations/policy_object.html",
        {
            "section": "roles",
            "heading": "Roles from identity-provider groups",
            "text": text,
            "problems": problems,
            "report": report,
        },
        status=422 if problems else 200,
    )


@admin_required
def policy_export(request: PortalRequest) -> HttpResponse:
    """The whole policy as a file to commit (what ``export_policy`` writes)."""
    response = HttpResponse(dump_policy(policy_current()), content_type="application/yaml")
    response["Content-Disposition"] = 'attachment; filename="policy.yaml"'
    return response


@admin_required
def policy_object(request: PortalRequest, section: str, name: str | None = None) -> HttpResponse:
    """One policy object as text, checked (a dry run showing the diff) and then applied."""
    if section not in EDITABLE_SECTIONS:
        raise Http404
    if name is not None and (section == "rate_cards" or name not in policy_current()[section]):
        raise Http404
    # Never cut: a text over the policy's size limit is refused whole (load_policy_text).
    text = request.POST.get("text", "") if request.method == "POST" else ""
    text = text or policy_object_text(section=section, name=name)
    problems: list[str] = []
    report = None
    if request.method == "POST":
        saving = request.POST.get("save") == "1"
        try:
            report = policy_object_apply(section=section, name=name, text=text, dry_run=not saving)
        except PolicyError as exc:
            problems = [str(p) for p in exc.problems]
        else:
            if saving:
                messages.success(request, f"Saved: {report.render()}")
                return redirect("operations:policy")
    return render(
        request,
        "operations/policy_object.html",
        {
            "section": section,
            "name": name,
            "text": text,
            "problems": problems,
            "report": report,
        },
        status=422 if problems else 200,
    )
