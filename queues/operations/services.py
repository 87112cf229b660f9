"""The admin side's writes: quotas through the policy service, node maintenance through the
cluster adapter, quota requests. Each is keyword-only and audited (see ``queues.audit``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.formatting import display, format_datetime
from queues.audit import audit_action
from queues.cluster.adapter import Cluster, ClusterRejected, ClusterUnreachable
from queues.cluster.nodes import (
    MAINTENANCE_DEADLINE_ANNOTATION,
    MAINTENANCE_LABEL,
    MAINTENANCE_REASON_ANNOTATION,
    MAINTENANCE_TAINT,
    MAINTENANCE_UNTIL_ANNOTATION,
)
from queues.models import (
    GpuClass,
    MaintenanceState,
    Node,
    QuotaRequest,
    QuotaRequestStatus,
    Team,
)
from queues.operations.selectors import class_capacity, quota_evidence
from queues.policy.apply import PolicyReport, policy_apply, policy_edit, policy_remove
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import (
    PolicyError,
    Problem,
    load_policy_text,
    no_roles,
    peak_reserved,
)
from queues.rates import GPU_AMOUNT_PLACES, gpu_amount


class RequestDecided(Exception):
    """The quota request was decided already (by someone else, or a second click)."""


class NodeActionFailed(Exception):
    """The cluster refused or did not answer for ``node``; ``done`` lists the nodes before it
    that were drained (or returned) all the same."""

    def __init__(self, node: str, done: list[str], error: Exception) -> None:
        super().__init__(f"{node}: {error}")
        self.node, self.done, self.error = node, done, error


# --- Quotas -----------------------------------------------------------------------------------


def quota_update(
    *, team: str, gpu_class: str, nominal: Decimal, borrowing_limit: Decimal
) -> PolicyReport:
    """Set one team's quota of one GPU class, exactly as a policy file would (``PolicyError``
    with the numbers when quotas plus reservations would promise more than the class has)."""
    current = policy_current()
    if team not in current["teams"]:
        raise PolicyError([Problem(f"teams[{team}]", None, "no such active team")])
    if gpu_class not in current["gpu_classes"]:
        raise PolicyError([Problem(f"gpu_classes[{gpu_class}]", None, "no such GPU class")])
    fields = copy.deepcopy(current["teams"][team])
    fields["quotas"][gpu_class] = {"nominal": nominal, "borrowing_limit": borrowing_limit}
    try:
        return policy_edit(sections={"teams": {team: fields}})
    except PolicyError as refused:
        most = quota_most_nominal(current, team=team, gpu_class=gpu_class)
        if most is None or nominal <= most.value:
            raise
        capacity, others, reserved = most.parts
        raise PolicyError(
            [
                *refused.problems,
                Problem(
                    f"teams[{team}].quotas.{gpu_class}",
                    "nominal",
                    f"at most {display(most.value)} fits: the cluster's {display(capacity)} "
                    f"less the other teams' nominal {display(others)} and the reservations' "
                    f"{display(reserved)}",
                ),
            ]
        ) from refused


@dataclass(frozen=True)
class MostNominal:
    value: Decimal
    parts: tuple[Decimal, Decimal, Decimal]  # capacity, other teams' nominal, peak reserved


def quota_most_nominal(current: dict[str, Any], *, team: str, gpu_class: str) -> MostNominal | None:
    """The largest nominal quota of ``gpu_class`` that ``team`` could be given now without
    promising more than the class has (None: the class's nodes are not known yet)."""
    gpu = GpuClass.objects.filter(name=gpu_class).first()
    if gpu is None:
        return None
    capacity_eq, nodes = class_capacity(gpu)
    if not nodes:
        return None
    capacity = gpu_amount(capacity_eq)
    others = sum(
        (
            t["quotas"][gpu_class]["nominal"]
            for name, t in current["teams"].items()
            if name != team and gpu_class in t["quotas"]
        ),
        Decimal(0),
    )
    reserved, _ = peak_reserved(
        [
            (r["amount"], r["starts_at"], r["ends_at"])
            for r in current["reservations"].values()
            if r["gpu_class"] == gpu_class
        ],
        now=timezone.now(),
    )
    value = max(capacity - others - reserved, Decimal(0)).quantize(GPU_AMOUNT_PLACES, ROUND_DOWN)
    return MostNominal(value, (capacity, others, reserved))


# --- Maintenance ------------------------------------------------------------------------------


def _stamp(value: datetime | None) -> str | None:
    return format_datetime(value) if value is not None else None


def node_drain(
    *,
    cluster: Cluster,
    nodes: list[Node],
    reason: str,
    until: datetime | None,
    deadline: datetime | None,
) -> list[str]:
    """Cordon ``nodes`` the Kubernetes way — ``spec.unschedulable``, the portal's maintenance
    taint (``NoSchedule``) and label, the reason, expected end and deadline as annotations — and
    mirror that at once. Work running there may finish; after ``deadline`` (if any) the
    reconcile preempts it. Returns the names drained. A node changed on the cluster while this
    ran is a ``ClusterRejected`` 409 (nothing half-written on that node)."""
    drained: list[str] = []
    for node in nodes:
        try:
            _drain_one(cluster, node, reason=reason, until=until, deadline=deadline)
        except (ClusterRejected, ClusterUnreachable) as exc:
            raise NodeActionFailed(node.name, drained, exc) from exc
        drained.append(node.name)
    return drained


def _drain_one(
    cluster: Cluster,
    node: Node,
    *,
    reason: str,
    until: datetime | None,
    deadline: datetime | None,
) -> None:
    raw = cluster.read_node(node.name)
    taints = [
        t for t in (raw.get("spec") or {}).get("taints") or [] if t.get("key") != MAINTENANCE_TAINT
    ]
    taints.append({"key": MAINTENANCE_TAINT, "value": "true", "effect": "NoSchedule"})
    cluster.patch_node(
        node.name,
        {
            "metadata": {
                "resourceVersion": raw["metadata"]["resourceVersion"],
                "labels": {MAINTENANCE_LABEL: "true"},
                "annotations": {
                    MAINTENANCE_REASON_ANNOTATION: reason,
                    MAINTENANCE_UNTIL_ANNOTATION: _stamp(until),
                    MAINTENANCE_DEADLINE_ANNOTATION: _stamp(deadline),
                },
            },
            "spec": {"unschedulable": True, "taints": taints},
        },
    )
    before = (node.maintenance, node.maintenance_reason, node.maintenance_until)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            maintenance=MaintenanceState.CORDONED,
            maintenance_reason=reason[:300],
            maintenance_until=until,
            maintenance_deadline=deadline,
        )
        audit_action(
            node,
            what="drain",
            changes={
                "maintenance": (before[0] or "in service", MaintenanceState.CORDONED.value),
                "maintenance_reason": (before[1], reason),
                "maintenance_until": (before[2], until),
                "maintenance_deadline": (node.maintenance_deadline, deadline),
            },
        )


def node_return(*, cluster: Cluster, nodes: list[Node]) -> list[str]:
    """Undo ``node_drain``: uncordon, drop the maintenance taint, label and annotations."""
    returned: list[str] = []
    for node in nodes:
        try:
            _return_one(cluster, node)
        except (ClusterRejected, ClusterUnreachable) as exc:
            raise NodeActionFailed(node.name, returned, exc) from exc
        returned.append(node.name)
    return returned


def _return_one(cluster: Cluster, node: Node) -> None:
    raw = cluster.read_node(node.name)
    taints = [
        t for t in (raw.get("spec") or {}).get("taints") or [] if t.get("key") != MAINTENANCE_TAINT
    ]
    cluster.patch_node(
        node.name,
        {
            "metadata": {
                "resourceVersion": raw["metadata"]["resourceVersion"],
                "labels": {MAINTENANCE_LABEL: None},
                "annotations": {
                    MAINTENANCE_REASON_ANNOTATION: None,
                    MAINTENANCE_UNTIL_ANNOTATION: None,
                    MAINTENANCE_DEADLINE_ANNOTATION: None,
                },
            },
            "spec": {"unschedulable": None, "taints": taints or None},
        },
    )
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            maintenance=MaintenanceState.NONE,
            maintenance_reason="",
            maintenance_until=None,
            maintenance_deadline=None,
        )
        audit_action(
            node,
            what="return to service",
            changes={
                "maintenance": (node.maintenance or "in service", "in service"),
                "maintenance_reason": (node.maintenance_reason, ""),
            },
        )


# --- Quota requests ---------------------------------------------------------------------------


class QuotaRequestRefused(Exception):
    """A quota request no admin could grant, with the field and the numbers."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def quota_request_file(
    *,
    by: Any,
    team: Team,
    gpu_class: GpuClass,
    nominal: Decimal,
    borrowing_limit: Decimal,
    justification: str,
    now: datetime,
) -> QuotaRequest:
    """A member asks for ``nominal`` / ``borrowing_limit`` of ``gpu_class`` for ``team`` (one of
    theirs); the evidence is what the portal knows now, stored with the request."""
    if not team.members.filter(pk=by.pk).exists():
        raise PermissionError(f"{by.get_username()} is not a member of team {team.name}")
    capacity, nodes = class_capacity(gpu_class)
    if nodes and nominal > capacity:
        # A nominal quota is a promise: more than the class has in all can never be promised.
        raise QuotaRequestRefused(
            "nominal",
            f"the cluster has {display(gpu_amount(capacity))} {gpu_class.name} GPUs in all "
            f"({nodes} healthy node{'s' if nodes != 1 else ''}): ask for at most that",
        )
    return QuotaRequest.objects.create(
        team=team,
        gpu_class=gpu_class,
        requested_by=by,
        nominal=nominal,
        borrowing_limit=borrowing_limit,
        justification=justification,
        evidence=quota_evidence(team=team, gpu_class=gpu_class, now=now).to_json(),
        created_at=now,
    )


def quota_request_approve(
    *,
    request: QuotaRequest,
    by: Any,
    now: datetime,
    nominal: Decimal | None = None,
    borrowing_limit: Decimal | None = None,
    reason: str = "",
) -> PolicyReport:
    """Set the team's quota to what is granted (through the policy service: the same refusals),
    then mark the request approved; both or neither. The admin may grant less than was asked
    (``nominal`` / ``borrowing_limit``), never more, and then says why (``reason``)."""
    granted_nominal = request.nominal if nominal is None else nominal
    granted_borrowing = request.borrowing_limit if borrowing_limit is None else borrowing_limit
    for field, granted, asked in (
        ("nominal", granted_nominal, request.nominal),
        ("borrowing_limit", granted_borrowing, request.borrowing_limit),
    ):
        if granted < 0:
            raise QuotaRequestRefused(field, "must be 0 or more")
        if granted > asked:
            raise QuotaRequestRefused(
                field,
                f"{display(granted)} is more than was asked ({display(asked)}): grant at most "
                "that, or edit the quota itself",
            )
    partial = (granted_nominal, granted_borrowing) != (request.nominal, request.borrowing_limit)
    if partial and not reason.strip():
        raise QuotaRequestRefused(
            "reason", "say why less than was asked is granted — the member sees it"
        )
    with transaction.atomic():
        _decide(
            request,
            by=by,
            now=now,
            status=QuotaRequestStatus.APPROVED,
            reason=reason.strip(),
            granted=(granted_nominal, granted_borrowing),
        )
        report = quota_update(
            team=request.team.name,
            gpu_class=request.gpu_class.name,
            nominal=granted_nominal,
            borrowing_limit=granted_borrowing,
        )
    return report


def quota_request_decline(*, request: QuotaRequest, by: Any, reason: str, now: datetime) -> None:
    if not reason.strip():
        raise ValueError("reason: required — the member sees it")
    _decide(request, by=by, now=now, status=QuotaRequestStatus.DECLINED, reason=reason.strip())


def _decide(
    request: QuotaRequest,
    *,
    by: Any,
    now: datetime,
    status: str,
    reason: str,
    granted: tuple[Decimal, Decimal] | None = None,
) -> None:
    """Pending → ``status`` once: the row is locked, so of two admins deciding at once one wins
    and the other gets ``RequestDecided``. ``save`` (not ``update``) so the audit log has it."""
    granted_nominal, granted_borrowing = granted if granted is not None else (None, None)
    with transaction.atomic():
        locked = (
            QuotaRequest.objects.select_for_update()
            .filter(pk=request.pk, status=QuotaRequestStatus.PENDING)
            .first()
        )
        if locked is None:
            raise RequestDecided(f"quota request {request.pk} was decided already")
        for row in (locked, request):
            row.status, row.decided_by, row.decided_at = status, by, now
            row.decision_reason = reason
            row.granted_nominal, row.granted_borrowing_limit = granted_nominal, granted_borrowing
        locked.save(
            update_fields=[
                "status",
                "decided_by",
                "decided_at",
                "decision_reason",
                "granted_nominal",
                "granted_borrowing_limit",
            ]
        )


def quota_text(nominal: Decimal, borrowing_limit: Decimal) -> str:
    return f"{display(nominal)} nominal + {display(borrowing_limit)} borrowing"


# --- Reservations ------------------------------------------------------------------------------


def reservation_save(*, name: str, fields: dict[str, Any]) -> PolicyReport:
    """Create or change reservation ``name`` (``fields`` as the policy file spells them: team,
    queue, gpu_class, amount, starts_at, ends_at), refused with the numbers when it would
    reserve more than the class has in its window."""
    return policy_edit(sections={"reservations": {name: fields}})


def reservation_end(*, name: str, now: datetime) -> PolicyReport:
    """End reservation ``name`` now: a window that has begun ends now; a standing reservation
    or one that has not begun is removed (kept inactive while jobs refer to it)."""
    current = policy_current()["reservations"].get(name)
    if current is None:
        raise PolicyError([Problem(f"reservations[{name}]", None, "no such active reservation")])
    starts_at, ends_at = current["starts_at"], current["ends_at"]
    if starts_at is not None and ends_at is not None and starts_at < now < ends_at:
        return reservation_save(name=name, fields={**current, "ends_at": now})
    return policy_remove(section="reservations", name=name)


# --- Policy objects as text ---------------------------------------------------------------------

EDITABLE_SECTIONS = (
    "gpu_classes",
    "capability_classes",
    "queues",
    "teams",
    "node_pools",
    "rate_cards",
)


def policy_object_apply(
    *, section: str, name: str | None, text: str, dry_run: bool
) -> PolicyReport:
    """Apply ``text`` — one object of ``section`` in the policy file's own words — exactly as
    ``apply_policy`` would. ``name`` is the object being edited (None: a new one, and for rate
    cards the only way: a card in force is never rewritten). The text may hold only that
    section and one entry; an edit may not rename its object."""
    data = load_policy_text(text)
    where = f"{section}[{name}]" if name else section
    if not isinstance(data, dict) or set(data) != {section}:
        raise PolicyError([Problem(where, None, f"give exactly one section, {section}")])
    entries = data[section]
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise PolicyError([Problem(where, None, "give exactly one entry")])
    entry = entries[0]
    if section == "rate_cards":
        if name is not None:
            raise PolicyError([Problem(where, None, "rate cards are never rewritten")])
    else:
        existing = policy_current()[section]
        if name is not None and entry.get("name") != name:
            raise PolicyError(
                [Problem(where, "name", f"must stay {name}; to rename, create a new one")]
            )
        if name is None and entry.get("name") in existing:
            raise PolicyError(
                [Problem(f"{section}[{entry.get('name')}]", "name", "exists already")]
            )
    report = policy_apply(text=text, dry_run=dry_run)
    # The text names one object: the rest of its section is "not in file" by design.
    report.changes = [c for c in report.changes if c.action != "not in file"]
    return report


def policy_roles_apply(*, text: str, dry_run: bool) -> PolicyReport:
    """Apply ``text`` — the policy file's ``roles`` section, which groups give finance and
    admin — exactly as ``apply_policy`` would. The text may hold that section only."""
    data = load_policy_text(text)
    if not isinstance(data, dict) or set(data) != {"roles"}:
        raise PolicyError([Problem("roles", None, "give exactly one section, roles")])
    return policy_apply(text=text, dry_run=dry_run)


def policy_roles_text() -> str:
    """The ``roles`` section as the policy file spells it (no group gives a role: both listed
    empty, as a model)."""
    return dump_policy({"roles": policy_current().get("roles") or no_roles()})


def policy_object_text(*, section: str, name: str | None) -> str:
    """One object as the policy file spells it (for a new one: the first as a model)."""
    current = policy_current()
    objects = current.get(section, {})
    if name is not None:
        return dump_policy({section: {name: objects[name]}})
    if section == "rate_cards":
        if not objects:
            return "rate_cards:\n  - effective_from: 2030-01-01T00:00:00Z\n"
        latest = objects[max(objects, key=lambda k: objects[k]["effective_from"])]
        return dump_policy({section: {"new": latest}})
    if not objects:
        return f"{section}:\n  - name: \n"
    first = next(iter(objects))
    return dump_policy({section: {"new-name": objects[first]}})
