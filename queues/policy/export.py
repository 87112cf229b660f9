"""The policy in the database, as the policy file spells it (for export and for apply's diff)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Prefetch

from portal.formatting import format_datetime
from queues.models import (
    Budget,
    BudgetScope,
    CapabilityClass,
    FairShareSettings,
    GpuClass,
    NodePool,
    Queue,
    RateCard,
    RateCardWeight,
    Reservation,
    RoleGroups,
    SubmissionSettings,
    Team,
    TeamMembership,
)
from queues.policy.parse import NAMED_SECTIONS, Policy, no_budgets, no_roles
from queues.policy.text import policy_yaml


def policy_current() -> Policy:
    """The active policy in the database, normalized exactly as ``parse_policy`` normalizes a file.

    Inactive (pruned but still referenced) objects are left out; every rate card is in, since
    rate cards are never removed.
    """
    policy: Policy = {}
    settings_row = FairShareSettings.objects.filter(pk=1).first()
    if settings_row is not None:
        policy["fair_share"] = {"usage_half_life": settings_row.usage_half_life}
    submissions = SubmissionSettings.objects.filter(pk=1).first()
    if submissions is not None:
        policy["submissions"] = {
            "plain_env_names_allowed": sorted(submissions.plain_env_names_allowed)
        }
    policy["gpu_classes"] = {
        g.name: {
            "product": g.product,
            "description": g.description,
            "hbm_gb": g.hbm_gb,
            "precisions": list(g.precisions),
            "mig_profiles": dict(sorted(g.mig_profiles.items())),
            "rdma": g.rdma,
            "tier": g.tier,
        }
        for g in GpuClass.objects.active().order_by("name")
    }
    policy["capability_classes"] = {
        c.name: {
            "description": c.description,
            "min_hbm_gb": c.min_hbm_gb,
            "precisions": list(c.precisions),
            "mig_profile": c.mig_profile,
            "rdma": c.rdma,
            "min_tier": c.min_tier,
        }
        for c in CapabilityClass.objects.active().order_by("name")
    }
    # The members the policy lists; those an identity-provider group gave the team are not the
    # policy's (a login gives and takes them).
    listed = Prefetch(
        "memberships", queryset=TeamMembership.objects.filter(listed=True).select_related("user")
    )
    teams = Team.objects.active().order_by("name").prefetch_related(listed, "quotas__gpu_class")
    policy["teams"] = {
        t.name: {
            "description": t.description,
            "namespace": t.namespace,
            "cost_center": t.cost_center,
            "fair_share_weight": t.fair_share_weight,
            "members": sorted(m.user.get_username() for m in t.memberships.all()),
            "groups": sorted(t.groups),
            "quotas": {
                q.gpu_class.name: {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit}
                for q in sorted(t.quotas.all(), key=lambda q: q.gpu_class.name)
            },
        }
        for t in teams
    }
    queues = (
        Queue.objects.active()
        .order_by("name")
        .prefetch_related("allowed_gpu_classes", "allowed_capability_classes", "teams")
    )
    policy["queues"] = {q.name: queue_policy_fields(q) for q in queues}
    policy["reservations"] = {
        r.name: {
            "team": r.team.name,
            "queue": r.queue.name if r.queue else None,
            "gpu_class": r.gpu_class.name,
            "amount": r.amount,
            "starts_at": r.starts_at,
            "ends_at": r.ends_at,
        }
        for r in Reservation.objects.active()
        .order_by("name")
        .select_related("team", "queue", "gpu_class")
    }
    pools = (
        NodePool.objects.active()
        .order_by("name")
        .select_related("gpu_class")
        .prefetch_related("queue_terms__queue")
    )
    policy["node_pools"] = {p.name: node_pool_policy_fields(p) for p in pools}
    cards = RateCard.objects.order_by("effective_from").prefetch_related(
        Prefetch("weights", queryset=RateCardWeight.objects.select_related("gpu_class"))
    )
    policy["rate_cards"] = {
        rate_card_key(card): {
            "effective_from": card.effective_from,
            "currency": card.currency,
            "price_per_normalized_gpu_hour": card.price_per_normalized_gpu_hour,
            "note": card.note,
            "weights": {
                w.gpu_class.name: w.weight
                for w in sorted(card.weights.all(), key=lambda w: w.gpu_class.name)
            },
        }
        for card in cards
    }
    budgets = no_budgets()
    sections = {BudgetScope.TEAM: "teams", BudgetScope.COST_CENTER: "cost_centers"}
    for budget in Budget.objects.order_by("scope", "name", "month"):
        budgets["currency"] = budget.currency
        into = budgets[sections[BudgetScope(budget.scope)]].setdefault(
            budget.name, {"monthly": None, "months": {}}
        )
        if budget.month is None:
            into["monthly"] = budget.amount
        else:
            into["months"][f"{budget.month:%Y-%m}"] = budget.amount
    # Like fair_share: in the policy once it holds a budget.
    if budgets != no_budgets():
        policy["budgets"] = budgets
    roles = no_roles()
    for row in RoleGroups.objects.all():
        if row.role in roles:
            roles[row.role] = {"groups": sorted(row.groups)}
    # Like fair_share: in the policy once it says something (a group that gives a role).
    if roles != no_roles():
        policy["roles"] = roles
    return policy


def node_pool_policy_fields(pool: NodePool) -> dict[str, Any]:
    return {
        "description": pool.description,
        "gpu_class": pool.gpu_class.name,
        "min_nodes": pool.min_nodes,
        "max_nodes": pool.max_nodes,
        "node": {
            "gpus": pool.node_gpus,
            "mig_layout": dict(sorted(pool.node_mig_layout.items())),
            "time_slicing_replicas": pool.node_time_slice_replicas,
            "labels": dict(sorted(pool.node_labels.items())),
        },
        "lead_time": {"median": pool.lead_time_median, "p90": pool.lead_time_p90},
        "scale_down_delay": pool.scale_down_delay,
        "queues": {
            t.queue.name: {"may_scale_up": t.may_scale_up, "warm_nodes": t.warm_nodes}
            for t in sorted(pool.queue_terms.all(), key=lambda t: t.queue.name)
            if t.queue.active
        },
    }


def rate_card_key(card: RateCard) -> str:
    return format_datetime(card.effective_from)


def queue_policy_fields(queue: Queue) -> dict[str, Any]:
    """A queue's terms as the policy file spells them (M2M relations must be prefetched)."""
    return {
        "description": queue.description,
        "priority": queue.priority,
        "expected_wait_target": queue.expected_wait_target,
        "max_runtime": queue.max_runtime,
        "default_runtime": queue.default_runtime,
        "preemption_class": queue.preemption_class,
        "grace_period": queue.grace_period,
        "sharing_mode": queue.sharing_mode,
        "allowed_gpu_classes": sorted(g.name for g in queue.allowed_gpu_classes.all()),
        "allowed_capability_classes": sorted(
            c.name for c in queue.allowed_capability_classes.all()
        ),
        "checkpoint_interval": queue.checkpoint_interval,
        "max_gpus_per_job": queue.max_gpus_per_job,
        "max_running_jobs_per_user": queue.max_running_jobs_per_user,
        "max_gpus_per_user": queue.max_gpus_per_user,
        "job_priority": {
            "min": queue.min_job_priority,
            "default": queue.default_job_priority,
            "max": queue.max_job_priority,
        },
        "teams": sorted(t.name for t in queue.teams.all()),
        "may_borrow": queue.may_borrow,
        "reservation_only": queue.reservation_only,
        "required_topology": queue.required_topology,
    }


def dump_policy(policy: Policy) -> str:
    """The normalized policy as a file ``parse_policy`` reads back to an equal policy."""
    document: dict[str, Any] = {}
    if "fair_share" in policy:
        document["fair_share"] = dict(policy["fair_share"])
    if "submissions" in policy:
        document["submissions"] = dict(policy["submissions"])
    for section in NAMED_SECTIONS:
        if section in policy:
            document[section] = [
                {"name": name, **_drop_defaults(fields)} for name, fields in policy[section].items()
            ]
    if "rate_cards" in policy:
        document["rate_cards"] = [
            {
                "effective_from": card["effective_from"],
                "currency": card["currency"],
                "price_per_normalized_gpu_hour": card["price_per_normalized_gpu_hour"],
                **({"note": card["note"]} if card["note"] else {}),
                "weights": card["weights"],
            }
            for card in policy["rate_cards"].values()
        ]
    if "budgets" in policy:
        document["budgets"] = {
            "currency": policy["budgets"]["currency"],
            **{
                section: {
                    name: {
                        **({"monthly": b["monthly"]} if b["monthly"] is not None else {}),
                        **({"months": b["months"]} if b["months"] else {}),
                    }
                    for name, b in policy["budgets"][section].items()
                }
                for section in ("teams", "cost_centers")
                if policy["budgets"][section]
            },
        }
    if "roles" in policy:
        document["roles"] = {
            role: {"groups": fields["groups"]} for role, fields in policy["roles"].items()
        }
    return policy_yaml(document)


def _drop_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Leave out empty optional fields so exported files read like hand-written ones."""
    # A team's groups are new: a team without any reads as it did before they existed.
    return {
        k: v
        for k, v in fields.items()
        if v is not None and v != "" and not (k == "groups" and v == [])
    }
