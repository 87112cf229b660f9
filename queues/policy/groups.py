"""Team memberships and roles from an identity provider's groups, refreshed at every login.

The policy maps groups to teams (``teams[].groups``) and to the finance and admin roles
(``roles``). At each login through an identity provider the person's groups there decide which
teams a group gives them and which of those roles; what the policy lists by hand and what was
given by hand stay untouched. A person whose groups no longer give a team leaves it; their jobs,
running or waiting, are left alone (they still see and may cancel the ones they submitted).
Every membership and role that begins or ends is audited with source ``login``, the person as
actor and the identity provider as ``via``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from portal.roles import role_held, role_set
from queues.audit import AuditSource, audit_action, audit_context
from queues.models import PortalRole, RoleGrant, RoleGroups, Team, TeamMembership


@dataclass
class GroupsOutcome:
    """What one login's groups changed: teams joined and left, roles given and taken (names),
    and the teams the person is in afterwards (policy-listed ones too)."""

    joined: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    roles_given: list[str] = field(default_factory=list)
    roles_taken: list[str] = field(default_factory=list)
    teams: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.joined or self.left or self.roles_given or self.roles_taken)


def teams_for_groups(groups: Iterable[str]) -> list[Team]:
    """The active teams that one of ``groups`` gives (names matched exactly)."""
    wanted = set(groups)
    return [team for team in Team.objects.active() if wanted.intersection(team.groups)]


def user_groups_apply(
    *, user: User, groups: frozenset[str], via: str, remote_addr: str | None = None
) -> GroupsOutcome:
    """Make ``user``'s group-given teams and roles what ``groups`` (their groups at the
    identity provider ``via``, as it vouched for them at this login) give through the policy.

    Joins the teams a group gives; leaves the teams a group gave before and none gives now,
    unless the policy lists the person there. Gives a role a group gives and the person lacks
    (remembered as a ``RoleGrant``); takes back a role a group gave before and none gives now.
    A role given by hand is never taken. Jobs are not touched."""
    outcome = GroupsOutcome()
    with (
        transaction.atomic(),
        audit_context(actor=user, source=AuditSource.LOGIN, remote_addr=remote_addr, via=via),
    ):
        wanted = {team.pk: team for team in teams_for_groups(groups)}
        rows = {
            m.team_id: m for m in TeamMembership.objects.filter(user=user).select_related("team")
        }
        for team_id, team in wanted.items():
            row = rows.get(team_id)
            if row is None:
                team.members.add(user, through_defaults={"listed": False, "via_groups": True})
                outcome.joined.append(team.name)
            elif not row.via_groups:
                # Listed by the policy already: now a group gives the team too.
                TeamMembership.objects.filter(pk=row.pk).update(via_groups=True)
        for team_id, row in rows.items():
            if not row.via_groups or team_id in wanted:
                continue
            if row.listed:
                TeamMembership.objects.filter(pk=row.pk).update(via_groups=False)
            else:
                row.team.members.remove(user)
                outcome.left.append(row.team.name)
        _roles_apply(user=user, groups=groups, outcome=outcome)
        outcome.teams = sorted(
            Team.objects.active().filter(members=user).values_list("name", flat=True)
        )
    outcome.joined.sort()
    outcome.left.sort()
    return outcome


def _roles_apply(*, user: User, groups: frozenset[str], outcome: GroupsOutcome) -> None:
    giving = {row.role: set(row.groups) for row in RoleGroups.objects.all()}
    granted = set(RoleGrant.objects.filter(user=user).values_list("role", flat=True))
    changes: dict[str, tuple[Any, Any]] = {}
    for role in PortalRole:
        given = bool(giving.get(role.value, set()) & groups)
        held = role_held(user, role.value)
        if given and not held:
            role_set(user, role.value, held=True)
            RoleGrant.objects.update_or_create(
                user=user, role=role.value, defaults={"granted_at": timezone.now()}
            )
            outcome.roles_given.append(role.value)
            changes[role.value] = ("no", "yes")
        elif not given and role.value in granted:
            if held:
                role_set(user, role.value, held=False)
                outcome.roles_taken.append(role.value)
                changes[role.value] = ("yes", "no")
            RoleGrant.objects.filter(user=user, role=role.value).delete()
        elif given and held and role.value not in granted:
            pass  # given by hand as well: the hand keeps it, no login takes it away
    if changes:
        audit_action(user, what="roles from identity-provider groups", changes=changes)


def on_identity_verified(
    sender: Any,
    *,
    user: User,
    groups: frozenset[str] | None,
    via: str,
    remote_addr: str | None = None,
    **kwargs: Any,
) -> GroupsOutcome | None:
    """Receiver of ``portal.sso.signals.identity_verified`` (connected by the app config): a
    login whose identity provider told the person's groups refreshes what they give."""
    if groups is None:
        return None
    return user_groups_apply(user=user, groups=groups, via=via, remote_addr=remote_addr)
