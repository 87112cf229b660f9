"""Applying a policy file: the one door every policy write goes through (all or nothing)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Model, ProtectedError
from django.utils import timezone

from portal.formatting import display, format_datetime
from queues.admission.capability import parse_share
from queues.audit import AuditSource, audit_changed, audit_created, audit_members
from queues.models import (
    Budget,
    BudgetScope,
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    Node,
    NodePool,
    NodePoolQueue,
    PortalRole,
    Queue,
    Quota,
    RateCard,
    RateCardWeight,
    Reservation,
    RoleGroups,
    SubmissionSettings,
    Team,
    TeamCostCenter,
    TeamMembership,
)
from queues.policy.export import dump_policy, policy_current
from queues.policy.parse import (
    NAMED_SECTIONS,
    Policy,
    PolicyError,
    Problem,
    load_policy_text,
    no_budgets,
    no_roles,
    parse_policy,
    peak_reserved,
    policy_overlay,
)
from queues.rates import gpu_amount

SECTION_MODELS: dict[str, type[Model]] = {
    "gpu_classes": GpuClass,
    "capability_classes": CapabilityClass,
    "teams": Team,
    "queues": Queue,
    "reservations": Reservation,
    "node_pools": NodePool,
}


@dataclass
class Change:
    section: str
    name: str
    action: str  # created | changed | reactivated | removed | deactivated | not in file
    fields: list[tuple[str, Any, Any]] = field(default_factory=list)
    note: str = ""
    # Field → the portal edit (made after the file last wrote the object) this change reverts.
    reverts: dict[str, str] = field(default_factory=dict)


@dataclass
class PolicyReport:
    """What applying a policy did (or, for a dry run, would do)."""

    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    users_created: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(c.action != "not in file" for c in self.changes) or bool(self.users_created)

    def render(self) -> str:
        symbols = {
            "created": "+",
            "changed": "~",
            "reactivated": "~",
            "removed": "-",
            "deactivated": "-",
            "not in file": "?",
        }
        lines: list[str] = []
        for change in self.changes:
            head = f"{symbols[change.action]} {change.section} {change.name}: {change.action}"
            if change.note:
                head += f" ({change.note})"
            lines.append(head)
            for name, old, new in change.fields:
                line = f"    {name}: {display(old)} → {display(new)}"
                if name in change.reverts:
                    line += f"  (reverts a portal edit: {change.reverts[name]})"
                lines.append(line)
        if self.users_created:
            lines.append(
                "users created without a usable password: " + ", ".join(self.users_created)
            )
        if not self.changed:
            lines.append("No changes: the database already matches the file.")
        if self.dry_run:
            lines.append("Dry run: nothing was written.")
        return "\n".join(lines)


def diff_fields(
    old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    """Field-by-field differences, descending into nested mappings (quotas, weights)."""
    differences: list[tuple[str, Any, Any]] = []
    for key in sorted(
        set(old) | set(new), key=lambda k: (list(new).index(k) if k in new else 999, k)
    ):
        before, after = old.get(key), new.get(key)
        if isinstance(before, Mapping) or isinstance(after, Mapping):
            differences += diff_fields(before or {}, after or {}, f"{prefix}{key}.")
        elif before != after:
            differences.append((f"{prefix}{key}", before, after))
    return differences


def policy_apply(*, text: str, dry_run: bool = False, prune: bool = False) -> PolicyReport:
    """Make the database hold what the policy file ``text`` says; all or nothing.

    Raises ``PolicyError`` (nothing written) for an invalid file, a rate card rewrite, or quotas
    plus reservations promising more GPUs of a class than the cluster's healthy nodes have.
    Objects in the database that the file's sections do not name are reported and left alone;
    with ``prune`` they are deleted, or deactivated when jobs, usage or reservations still
    reference them.
    """
    report = PolicyReport(dry_run=dry_run)
    started = timezone.now()
    with transaction.atomic():
        # Read, check and write as one: two admins saving at once must not both pass the
        # capacity check against the same old state.
        _policy_lock()
        current = policy_current()
        wanted = parse_policy(load_policy_text(text), existing=current)
        problems = _rate_card_rewrites(current, wanted)
        problems += _overcommitments(
            policy_overlay(current, wanted, prune=prune), now=timezone.now()
        )
        if problems:
            raise PolicyError(problems)
        _write_policy(current, wanted, report)
        for section in reversed(NAMED_SECTIONS):
            if section not in wanted:
                continue
            for name in current[section]:
                if name in wanted[section]:
                    continue
                if prune:
                    report.changes.append(_prune(section, name))
                else:
                    report.changes.append(
                        Change(section, name, "not in file", note="left alone; --prune removes it")
                    )
        if "rate_cards" in wanted:
            for key in current["rate_cards"]:
                if key not in wanted["rate_cards"]:
                    report.changes.append(
                        Change(
                            "rate_cards", key, "not in file", note="rate cards are never removed"
                        )
                    )
        _note_reverted_portal_edits(report, before=started)
        if dry_run:
            transaction.set_rollback(True)
    return report


def policy_edit(*, sections: Policy, dry_run: bool = False) -> PolicyReport:
    """Change the objects in ``sections`` (normalized as ``policy_current`` returns them; only
    the objects to change) exactly as a policy file naming them would: the same parsing, the
    same refusals (``PolicyError`` with the numbers, nothing written), the same writer. The
    portal's pages and the quota request approvals write policy only through here."""
    return policy_apply(text=dump_policy(sections), dry_run=dry_run)


def policy_remove(*, section: str, name: str) -> PolicyReport:
    """Remove one named object as ``--prune`` would (deleted, or deactivated while referenced)."""
    current = policy_current()
    if name not in current.get(section, {}):
        raise PolicyError([Problem(f"{section}[{name}]", None, "no such active object")])
    remaining = {k: v for k, v in current[section].items() if k != name}
    return policy_apply(text=dump_policy({section: remaining}), prune=True)


def policy_problems() -> list[Problem]:
    """What is wrong with the policy the database holds now (for writes that do not go through a
    file, such as the Django admin's forms): the file's validation and the capacity check."""
    current = policy_current()
    try:
        parse_policy(load_policy_text(dump_policy(current)))
    except PolicyError as exc:
        return exc.problems
    return _overcommitments(policy_overlay(current, {}, prune=False), now=timezone.now())


# Any number; the PostgreSQL advisory lock that policy writes take for their transaction.
POLICY_LOCK = 0x6770_7501


def _policy_lock() -> None:
    """Serialize policy writes. PostgreSQL: a transaction-scoped advisory lock. SQLite allows one
    writer at a time and an UPDATE takes the write lock as it starts (even matching no row), so
    a second policy write waits here until the first has committed, then reads what it wrote."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [POLICY_LOCK])
    else:
        FairShareSettings.objects.filter(pk=0).update(usage_half_life=F("usage_half_life"))


def _rate_card_rewrites(current: Policy, wanted: Policy) -> list[Problem]:
    problems = []
    for key, card in wanted.get("rate_cards", {}).items():
        stored = current["rate_cards"].get(key)
        if stored is not None and diff_fields(stored, card):
            differences = ", ".join(
                f"{name} {display(old)} → {display(new)}"
                for name, old, new in diff_fields(stored, card)
            )
            problems.append(
                Problem(
                    f"rate_cards[{key}]",
                    None,
                    f"rate cards are never rewritten ({differences}); add a new card with a later "
                    "effective_from instead",
                )
            )
    return problems


def _write_submissions(
    before: Mapping[str, Any] | None, wanted: Mapping[str, Any], report: PolicyReport
) -> None:
    """The ``submissions`` section: one settings row (audited like every policy object)."""
    if before == wanted:
        return
    row = SubmissionSettings.objects.filter(pk=1).first() or SubmissionSettings(pk=1)
    row.plain_env_names_allowed = list(wanted["plain_env_names_allowed"])
    row.save()
    if before is None:
        report.changes.append(Change("submissions", "settings", "created"))
    else:
        report.changes.append(
            Change("submissions", "settings", "changed", diff_fields(before, wanted))
        )


def _overcommitments(result: Policy, *, now: datetime) -> list[Problem]:
    """Quotas plus peak reservations of each GPU class must fit its healthy capacity, if known,
    in GPU-equivalents: a node cut into MIG slices offers its slices' shares (an A100 cut into
    3g.40gb + 2g.20gb + 1g.10gb is 6/7 of a GPU), as the policy being applied defines them."""
    capacity: dict[str, Fraction] = {}
    nodes: Counter[str] = Counter()
    product_to_class = {f["product"]: name for name, f in result["gpu_classes"].items()}
    for node in Node.objects.filter(healthy=True).select_related("gpu_class"):
        name = node.gpu_class.name if node.gpu_class else product_to_class.get(node.product)
        if name is not None and name in result["gpu_classes"]:
            spec = result["gpu_classes"][name]
            capacity[name] = capacity.get(name, Fraction(0)) + _node_gpu_equivalents(node, spec)
            nodes[name] += 1
    problems = []
    for gpu_class in result["gpu_classes"]:
        if gpu_class not in capacity:
            continue
        quotas = sum(
            (
                t["quotas"][gpu_class]["nominal"]
                for t in result["teams"].values()
                if gpu_class in t["quotas"]
            ),
            Decimal(0),
        )
        reserved, peak_at = peak_reserved(
            [
                (r["amount"], r["starts_at"], r["ends_at"])
                for r in result["reservations"].values()
                if r["gpu_class"] == gpu_class
            ],
            now=now,
        )
        if quotas + reserved > capacity[gpu_class]:
            when = f" at {format_datetime(peak_at)}" if peak_at else ""
            problems.append(
                Problem(
                    f"gpu_classes[{gpu_class}]",
                    None,
                    f"quotas ({display(quotas)}) plus reservations ({display(reserved)}{when}) "
                    f"promise {display(quotas + reserved)} GPUs, but the cluster has "
                    f"{display(gpu_amount(capacity[gpu_class]))} on {nodes[gpu_class]} healthy "
                    "node(s)",
                )
            )
    return problems


def _node_gpu_equivalents(node: Node, spec: Mapping[str, Any]) -> Fraction:
    """What a node offers in GPU-equivalents under the class ``spec`` (the policy's)."""
    if node.mig_layout:
        shares = {p: parse_share(s) for p, s in (spec.get("mig_profiles") or {}).items()}
        return sum(
            (count * shares[p] for p, count in node.mig_layout.items() if p in shares),
            Fraction(0),
        )
    return Fraction(node.gpu_count)


def _write_policy(current: Policy, wanted: Policy, report: PolicyReport) -> None:
    if "fair_share" in wanted:
        before = current.get("fair_share")
        half_life = wanted["fair_share"]["usage_half_life"]
        FairShareSettings.objects.update_or_create(pk=1, defaults={"usage_half_life": half_life})
        if before is None:
            report.changes.append(Change("fair_share", "settings", "created"))
        elif before != wanted["fair_share"]:
            report.changes.append(
                Change(
                    "fair_share", "settings", "changed", diff_fields(before, wanted["fair_share"])
                )
            )
    if "roles" in wanted:
        before = current.get("roles") or no_roles()
        if before != wanted["roles"]:
            _write_roles(wanted["roles"])
            for role, fields in wanted["roles"].items():
                if before[role] != fields:
                    report.changes.append(
                        Change("roles", role, "changed", diff_fields(before[role], fields))
                    )
    if "submissions" in wanted:
        _write_submissions(current.get("submissions"), wanted["submissions"], report)
    if "budgets" in wanted:
        _write_budgets(current.get("budgets") or no_budgets(), wanted["budgets"], report)
    writers = {
        "gpu_classes": _write_gpu_class,
        "capability_classes": _write_capability_class,
        "teams": _write_team,
        "queues": _write_queue,
        "reservations": _write_reservation,
        "node_pools": _write_node_pool,
    }
    for section in NAMED_SECTIONS:
        for name, fields in wanted.get(section, {}).items():
            before = current[section].get(name)
            if before is not None and not diff_fields(before, fields):
                continue
            model = SECTION_MODELS[section]
            inactive = before is None and model._default_manager.filter(name=name).exists()
            writers[section](name, fields, report)
            if before is None:
                action = "reactivated" if inactive else "created"
                report.changes.append(Change(section, name, action))
            else:
                report.changes.append(Change(section, name, "changed", diff_fields(before, fields)))
    for key, card in wanted.get("rate_cards", {}).items():
        if key in current["rate_cards"]:
            continue
        rate_card = RateCard.objects.create(
            effective_from=card["effective_from"],
            currency=card["currency"],
            price_per_normalized_gpu_hour=card["price_per_normalized_gpu_hour"],
            note=card["note"],
        )
        gpu_classes = _by_name(GpuClass, card["weights"])
        weights = RateCardWeight.objects.bulk_create(
            RateCardWeight(rate_card=rate_card, gpu_class=gpu_classes[name], weight=weight)
            for name, weight in card["weights"].items()
        )
        audit_created(weights)  # bulk_create fires no signals
        report.changes.append(Change("rate_cards", key, "created"))


def _write_budgets(before: dict[str, Any], wanted: dict[str, Any], report: PolicyReport) -> None:
    """The file's budgets replace the database's (one row per scope, name and month)."""
    if before == wanted:
        return
    Budget.objects.all().delete()
    rows: list[tuple[str, str, date | None, Decimal]] = []
    for section, scope in (("teams", BudgetScope.TEAM), ("cost_centers", BudgetScope.COST_CENTER)):
        for name, budget in wanted[section].items():
            if budget["monthly"] is not None:
                rows.append((scope, name, None, budget["monthly"]))
            for month, amount in budget["months"].items():
                rows.append((scope, name, parse_month_text(month), amount))
            old = before[section].get(name)
            if old != budget:
                action = "created" if old is None else "changed"
                report.changes.append(Change("budgets", f"{section}.{name}", action))
        for name in before[section]:
            if name not in wanted[section]:
                report.changes.append(Change("budgets", f"{section}.{name}", "removed"))
    Budget.objects.bulk_create(
        Budget(scope=scope, name=name, month=month, amount=amount, currency=wanted["currency"])
        for scope, name, month, amount in rows
    )
    if before["currency"] != wanted["currency"] and before["currency"]:
        report.changes.append(Change("budgets", "currency", "changed"))


def parse_month_text(text: str) -> date:
    return date(int(text[:4]), int(text[5:7]), 1)


def _by_name(model: type[Model], names: Iterable[str]) -> dict[str, Any]:
    return {o.name: o for o in model.objects.filter(name__in=list(names))}  # type: ignore[attr-defined]


def _upsert(model: type[Model], name: str, values: dict[str, Any]) -> Any:
    obj, _ = model.objects.update_or_create(name=name, defaults={**values, "active": True})  # type: ignore[attr-defined]
    return obj


def _write_gpu_class(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(GpuClass, name, dict(fields))


def _write_capability_class(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(CapabilityClass, name, dict(fields))


def _write_team(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    before = Team.objects.filter(name=name).values_list("cost_center", flat=True).first()
    team = _upsert(
        Team,
        name,
        {
            k: fields[k]
            for k in ("description", "namespace", "cost_center", "fair_share_weight", "groups")
        },
    )
    if before != team.cost_center:
        # Chargeback splits usage at this instant: GPUs held from now on are the new center's.
        TeamCostCenter.objects.create(
            team=team, cost_center=team.cost_center, effective_from=timezone.now()
        )
    team_listed_members_set(team=team, users=_users(fields["members"], report))
    gpu_classes = _by_name(GpuClass, fields["quotas"])
    for gpu_name, quota in fields["quotas"].items():
        Quota.objects.update_or_create(team=team, gpu_class=gpu_classes[gpu_name], defaults=quota)
    Quota.objects.filter(team=team).exclude(gpu_class__name__in=list(fields["quotas"])).delete()


def team_listed_members_set(*, team: Team, users: list[Any]) -> None:
    """Make ``users`` the members the policy lists for ``team``, exactly; the policy file's
    ``members`` (and the Django admin's list) write through here.

    Members an identity-provider group gave the team stay members whatever the list says: a
    person the list stops naming leaves the team only if no group keeps them in it. Memberships
    that begin or end are audited by the many-to-many signal; a member the list starts or stops
    naming without joining or leaving is audited as a change of ``listed members``."""
    wanted = {user.pk: user for user in users}
    rows = {m.user_id: m for m in TeamMembership.objects.filter(team=team).select_related("user")}
    unlisted = [m for uid, m in rows.items() if m.listed and uid not in wanted]
    relisted = [m for uid, m in rows.items() if not m.listed and uid in wanted]
    leaving = [m.user_id for m in unlisted if not m.via_groups]
    staying = [m for m in unlisted if m.via_groups]
    if leaving:
        team.members.remove(*leaving)
    joining = [user for uid, user in wanted.items() if uid not in rows]
    if joining:
        team.members.add(*joining, through_defaults={"listed": True, "via_groups": False})
    if staying:
        TeamMembership.objects.filter(pk__in=[m.pk for m in staying]).update(listed=False)
    if relisted:
        TeamMembership.objects.filter(pk__in=[m.pk for m in relisted]).update(listed=True)
    # update() fires no signal; these people stay members, only whether the policy names them
    # changes.
    audit_members(
        team,
        field="listed members",
        added=sorted(m.user.get_username() for m in relisted),
        removed=sorted(m.user.get_username() for m in staying),
    )


def _write_roles(wanted: dict[str, Any]) -> None:
    for role in PortalRole:
        RoleGroups.objects.update_or_create(
            role=role.value, defaults={"groups": wanted[role.value]["groups"]}
        )


def _users(usernames: list[str], report: PolicyReport) -> list[Any]:
    """The users named, creating missing ones without a usable password (they log in later)."""
    user_model = get_user_model()
    users = {u.username: u for u in user_model.objects.filter(username__in=usernames)}
    for username in usernames:
        if username not in users:
            users[username] = user_model.objects.create_user(username=username, password=None)
            report.users_created.append(username)
    return [users[u] for u in usernames]


def _write_queue(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    values = {
        k: v
        for k, v in fields.items()
        if k not in ("allowed_gpu_classes", "allowed_capability_classes", "teams", "job_priority")
    }
    values["min_job_priority"] = fields["job_priority"]["min"]
    values["default_job_priority"] = fields["job_priority"]["default"]
    values["max_job_priority"] = fields["job_priority"]["max"]
    queue = _upsert(Queue, name, values)
    queue.allowed_gpu_classes.set(_by_name(GpuClass, fields["allowed_gpu_classes"]).values())
    queue.allowed_capability_classes.set(
        _by_name(CapabilityClass, fields["allowed_capability_classes"]).values()
    )
    queue.teams.set(_by_name(Team, fields["teams"]).values())


def _write_reservation(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    _upsert(
        Reservation,
        name,
        {
            "team": Team.objects.get(name=fields["team"]),
            "queue": Queue.objects.get(name=fields["queue"]) if fields["queue"] else None,
            "gpu_class": GpuClass.objects.get(name=fields["gpu_class"]),
            "amount": fields["amount"],
            "starts_at": fields["starts_at"],
            "ends_at": fields["ends_at"],
        },
    )


def _write_node_pool(name: str, fields: dict[str, Any], report: PolicyReport) -> None:
    shape, lead = fields["node"], fields["lead_time"]
    pool = _upsert(
        NodePool,
        name,
        {
            "description": fields["description"],
            "gpu_class": GpuClass.objects.get(name=fields["gpu_class"]),
            "min_nodes": fields["min_nodes"],
            "max_nodes": fields["max_nodes"],
            "node_gpus": shape["gpus"],
            "node_mig_layout": shape["mig_layout"],
            "node_time_slice_replicas": shape["time_slicing_replicas"],
            "node_labels": shape["labels"],
            "lead_time_median": lead["median"],
            "lead_time_p90": lead["p90"],
            "scale_down_delay": fields["scale_down_delay"],
        },
    )
    queues = _by_name(Queue, fields["queues"])
    for queue_name, terms in fields["queues"].items():
        NodePoolQueue.objects.update_or_create(pool=pool, queue=queues[queue_name], defaults=terms)
    NodePoolQueue.objects.filter(pool=pool).exclude(queue__name__in=list(fields["queues"])).delete()


def _prune(section: str, name: str) -> Change:
    """Delete an object the file no longer names, or deactivate it while something refers to it."""
    model = SECTION_MODELS[section]
    obj = model.objects.get(name=name)  # type: ignore[attr-defined]
    try:
        with transaction.atomic():
            obj.delete()
    except ProtectedError as exc:
        model.objects.filter(pk=obj.pk).update(active=False)  # type: ignore[attr-defined]
        audit_changed(obj, {"active": (True, False)})  # update() fires no signals
        counts = Counter(o._meta.verbose_name for o in exc.protected_objects)
        refs = ", ".join(f"{n} {what}{'s' if n > 1 else ''}" for what, n in sorted(counts.items()))
        return Change(section, name, "deactivated", note=f"still referenced by {refs}")
    return Change(section, name, "removed")


# --- Portal edits a file would revert ----------------------------------------------------------

# Model field → the policy file's field, where they differ.
_FILE_FIELDS = {
    "min_job_priority": "job_priority.min",
    "default_job_priority": "job_priority.default",
    "max_job_priority": "job_priority.max",
}


def _note_reverted_portal_edits(report: PolicyReport, *, before: datetime) -> None:
    """Name, for each field a change rewrites, the portal edit (page, Django admin or API) made
    after a file last wrote that object, if any: the audit log tells which values came from
    the portal. Only entries from ``before`` this apply began count (its own writes are in the
    same transaction)."""
    for change in report.changes:
        if change.action != "changed" or change.section not in SECTION_MODELS:
            continue
        names = {name for name, _, _ in change.fields}
        edits = _portal_edits(change.section, change.name, before=before)
        change.reverts = {f: why for f, why in edits.items() if f in names}


def _portal_edits(section: str, name: str, *, before: datetime) -> dict[str, str]:
    from auditlog.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    model = SECTION_MODELS[section]
    obj = model.objects.filter(name=name).first()  # type: ignore[attr-defined]
    if obj is None:
        return {}
    targets: list[tuple[Any, str]] = [(obj, "")]
    if section == "teams":
        targets += [
            (q, f"quotas.{q.gpu_class.name}.")
            for q in Quota.objects.filter(team=obj).select_related("gpu_class")
        ]
    entries: list[tuple[datetime, str, Any, str]] = []
    for target, prefix in targets:
        content_type = ContentType.objects.get_for_model(target)
        for entry in LogEntry.objects.filter(
            content_type=content_type, object_pk=str(target.pk), timestamp__lt=before
        ).select_related("actor"):
            source = (entry.additional_data or {}).get("source")
            entries.append((entry.timestamp, source or "", entry, prefix))
    file_times = [at for at, source, _, _ in entries if source == AuditSource.FILE]
    last_file = max(file_times) if file_times else None
    edits: dict[str, str] = {}
    for at, source, entry, prefix in sorted(entries, key=lambda e: e[0]):
        if source not in (AuditSource.PAGE, AuditSource.ADMIN, AuditSource.API):
            continue
        if last_file is not None and at <= last_file:
            continue
        who = entry.actor.get_username() if entry.actor is not None else "someone"
        for field_name in entry.changes_dict:
            path = prefix + _FILE_FIELDS.get(field_name, field_name)
            edits[path] = f"{who} via {source}, {format_datetime(at)}"
    return edits
