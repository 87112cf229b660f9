"""Who may do what: the three roles of docs/concepts.md in one place.

- member: belongs to one or more teams (``Team.members``);
- finance: in the ``finance`` group;
- admin: ``is_staff`` (and superuser: ``/admin/``).

This module is the only reader of ``is_staff`` (``tests/test_architecture.py`` checks it): every
other check asks ``is_admin``, ``is_finance`` or ``admins_and_finance``; templates read
``user_is_admin`` and ``user_is_finance`` from ``roles_context``.

Finance and admin are given by hand (the Django admin, ``seed_demo``) or by an identity
provider's groups at login (``queues/policy/groups.py``, through ``role_set``).
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, Group, User
from django.db.models import Q, QuerySet
from django.http import HttpRequest

FINANCE_GROUP = "finance"
# The roles that are given rather than earned by team membership (queues.models.PortalRole).
FINANCE = "finance"
ADMIN = "admin"

# Who asks: a signed-in user, or nobody yet.
Viewer = User | AnonymousUser


def is_admin(user: Viewer) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def is_finance(user: Viewer) -> bool:
    if not user.is_authenticated:
        return False
    if is_admin(user):
        return True
    return user.groups.filter(name=FINANCE_GROUP).exists()


def admins_and_finance() -> QuerySet[User]:
    """The active users who are admins or in finance (those told about the whole cluster)."""
    return (
        User.objects.filter(is_active=True)
        .filter(Q(is_staff=True) | Q(groups__name=FINANCE_GROUP))
        .distinct()
    )


def role_held(user: User, role: str) -> bool:
    """Whether ``user`` holds ``role`` itself (an admin is not thereby in finance here)."""
    if role == ADMIN:
        return bool(user.is_staff)
    if role == FINANCE:
        return user.groups.filter(name=FINANCE_GROUP).exists()
    raise ValueError(f"unknown role {role!r}")


def role_set(user: User, role: str, *, held: bool) -> None:
    """Give or take ``role``. An admin is staff and superuser (everything, ``/admin/``
    included); taking the role takes both."""
    if role == ADMIN:
        User.objects.filter(pk=user.pk).update(is_staff=held, is_superuser=held)
        user.is_staff = user.is_superuser = held
    elif role == FINANCE:
        group, _ = Group.objects.get_or_create(name=FINANCE_GROUP)
        if held:
            user.groups.add(group)
        else:
            user.groups.remove(group)
    else:
        raise ValueError(f"unknown role {role!r}")


def landing(user: Viewer) -> str:
    """Where a role's work is, as a URL name: admins the admin side, finance the chargeback
    statement, members (and anyone else) the queues."""
    if is_admin(user):
        return "operations:quotas"
    if is_finance(user):
        return "chargeback:report"
    return "queues:catalog"


def roles_context(request: HttpRequest) -> dict[str, bool]:
    """Template context: which role-specific navigation to show."""
    user = request.user
    return {"user_is_admin": is_admin(user), "user_is_finance": is_finance(user)}
