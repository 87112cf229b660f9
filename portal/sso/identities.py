"""The portal user an identity provider's person logs in as, and why a login is refused.

The rule for usernames, in one place (``identity_user_find``):

1. A person the portal has seen before (the same issuer and subject) is the user they were
   linked to at their first login, whatever their username claim says now.
2. Otherwise, the username claim names the user:
   - no such user: a new one is created, without a usable password;
   - a user without a usable password (one the policy's ``members`` created, or one made by
     another identity provider) is taken over and linked;
   - a user with a local password is **refused**: an identity provider never logs anyone in as
     a local account (the break-glass administrator, a demo login). An administrator removes
     that account's password (the next login then takes it over) or renames it;
   - a user already linked to another person of the same issuer is **refused** (the provider
     gave a former colleague's username to someone new).
3. A deactivated user is refused.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol, cast

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone

from portal.models import ExternalIdentity
from portal.sso.signals import identity_verified

logger = logging.getLogger(__name__)

# Django's username rule (letters, digits and @.+-_, at most 150), matched on the whole string.
USERNAME = re.compile(r"[\w.@+-]{1,150}")


@dataclass(frozen=True)
class Identity:
    """A person as an identity provider vouched for them at this login."""

    issuer: str
    subject: str
    username: str
    # Their groups at the provider; None when the provider is not asked for groups.
    groups: frozenset[str] | None
    # The provider in words, for the audit log ("OpenID Connect https://idp.example.org").
    via: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""


class LoginRefused(Exception):
    """A login the portal refuses: ``reason`` tells the person in plain words, ``detail`` tells
    the administrators what check failed; ``status`` is the page's HTTP status."""

    def __init__(self, code: str, reason: str, *, detail: str = "", status: int = 403) -> None:
        self.code = code
        self.reason = reason
        self.detail = detail
        self.status = status
        super().__init__(f"{code}: {reason} {detail}".strip())


def identity_user_find(*, issuer: str, subject: str, username: str) -> User | None:
    """The user this identity logs in as, or None when a new one is to be created. Raises
    ``LoginRefused`` for a local account of that name, a name another person of this issuer
    holds, or a deactivated user (the rule in the module's docstring)."""
    link = (
        ExternalIdentity.objects.filter(issuer=issuer, subject=subject)
        .select_related("user")
        .first()
    )
    if link is not None:
        user: User = link.user
    else:
        found = get_user_model().objects.filter(username=username).first()
        if found is None:
            return None
        user = found
        if ExternalIdentity.objects.filter(user=user, issuer=issuer).exists():
            raise LoginRefused(
                "taken",
                f"The portal account {username} belongs to another person at your identity "
                "provider, so you cannot log in as it. Ask an administrator.",
                detail=f"user {username!r} is linked to another subject of {issuer}",
            )
        if user.has_usable_password():
            raise LoginRefused(
                "local-account",
                f"The portal has a local account named {username}, with its own password, and a "
                "login through an identity provider or a directory never uses one. Ask an "
                "administrator to remove that account's password (your next login then takes "
                "it over) or to rename it.",
                detail=f"user {username!r} has a usable local password and no link to {issuer}",
            )
    if not user.is_active:
        raise LoginRefused(
            "inactive",
            f"Your portal account {user.get_username()} is deactivated. Ask an administrator.",
            detail="user.is_active is false",
        )
    return user


def identity_link(*, user: User, identity: Identity) -> None:
    """Remember that ``identity`` logs in as ``user`` (and the groups it had this time)."""
    now = timezone.now()
    groups = sorted(identity.groups) if identity.groups is not None else []
    updated = ExternalIdentity.objects.filter(
        issuer=identity.issuer, subject=identity.subject, user=user
    ).update(groups=groups, last_login_at=now)
    if not updated:
        ExternalIdentity.objects.create(
            user=user,
            issuer=identity.issuer,
            subject=identity.subject,
            groups=groups,
            first_login_at=now,
            last_login_at=now,
        )


def identity_user(identity: Identity) -> User:
    """The user ``identity`` logs in as: found, taken over or created by the rule above, linked,
    and given the provider's e-mail address and names. Raises ``LoginRefused``."""
    if not USERNAME.fullmatch(identity.username):
        raise LoginRefused(
            "username-invalid",
            f"Your identity provider's username {identity.username[:40]!r} is not one the "
            "portal can use (letters, digits and @ . + - _, at most 150).",
            detail="the username claim does not match [\\w.@+-]{1,150}",
        )
    try:
        with transaction.atomic():
            return _identity_user(identity)
    except IntegrityError:
        # Two first logins of one person at once: the other made the user or the link.
        with transaction.atomic():
            return _identity_user(identity)


def _identity_user(identity: Identity) -> User:
    user = identity_user_find(
        issuer=identity.issuer, subject=identity.subject, username=identity.username
    )
    if user is None:
        user = get_user_model().objects.create_user(username=identity.username, password=None)
        logger.info("single sign-on created user %s for %s", user, identity.via)
    changed = []
    for field in ("email", "first_name", "last_name"):
        value = getattr(identity, field)
        if value and getattr(user, field) != value:
            setattr(user, field, value[:150] if field != "email" else value[:254])
            changed.append(field)
    if changed:
        user.save(update_fields=changed)
    identity_link(user=user, identity=identity)
    return user


class GroupsOutcome(Protocol):
    """What a receiver of ``identity_verified`` answers (``queues.policy.groups``)."""

    joined: list[str]
    left: list[str]
    roles_given: list[str]
    roles_taken: list[str]
    teams: list[str]


def identity_verified_send(request: HttpRequest | None, *, user: User, identity: Identity) -> None:
    """Tell the portal that ``identity`` logs in as ``user``: the policy's group mapping
    refreshes their teams and roles, and the person is told what changed."""
    address = request.META.get("REMOTE_ADDR") if request is not None else None
    answers = identity_verified.send(
        sender=Identity,
        user=user,
        groups=identity.groups,
        via=identity.via,
        remote_addr=address if isinstance(address, str) else None,
    )
    for _, answer in answers:
        outcome = cast(Any, answer)
        if outcome is not None and request is not None:
            text = groups_outcome_text(outcome)
            if text:
                messages.info(request, text)


def groups_outcome_text(outcome: GroupsOutcome) -> str:
    """What a login's groups changed, in words ("" when nothing did)."""
    parts = []
    if outcome.joined:
        parts.append(f"you joined {_names(outcome.joined)}")
    if outcome.left:
        parts.append(f"you left {_names(outcome.left)} (jobs you submitted there are left alone)")
    if outcome.roles_given:
        parts.append(f"you are now {_names(outcome.roles_given)}")
    if outcome.roles_taken:
        parts.append(f"you are no longer {_names(outcome.roles_taken)}")
    if not parts:
        return ""
    return "Your groups at your identity provider changed: " + "; ".join(parts) + "."


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
