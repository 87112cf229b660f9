"""Who may do what: the three roles of docs/concepts.md in one place.

- member: belongs to one or more teams (``Team.members``);
- finance: in the ``finance`` group;
- admin: ``is_staff``.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

FINANCE_GROUP = "finance"

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
