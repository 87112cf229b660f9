from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from portal.roles import FINANCE_GROUP
from queues.models import Team

# Demo logins for a local demo database only; `make demo` prints them.
DEMO_PASSWORD = "demo-portal"
DEMO_MEMBER = "mia"


class Command(BaseCommand):
    help = "Give the demo users passwords and roles: a member in two teams, finance, an admin."

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        member = user_model.objects.filter(username=DEMO_MEMBER).first()
        if member is None:
            raise CommandError(
                f"user {DEMO_MEMBER!r} does not exist: apply examples/policy.yaml first"
            )
        member.set_password(DEMO_PASSWORD)
        member.save(update_fields=["password"])

        finance, _ = user_model.objects.get_or_create(username="fiona")
        finance.set_password(DEMO_PASSWORD)
        finance.save(update_fields=["password"])
        finance.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])

        admin, _ = user_model.objects.get_or_create(username="ada")
        admin.is_staff = admin.is_superuser = True
        admin.set_password(DEMO_PASSWORD)
        admin.save(update_fields=["password", "is_staff", "is_superuser"])

        teams = ", ".join(Team.objects.filter(members=member).values_list("name", flat=True))
        self.stdout.write(
            f"Demo logins (password for all: {DEMO_PASSWORD}):\n"
            f"  member   {DEMO_MEMBER:<6} (teams: {teams})\n"
            "  finance  fiona\n"
            "  admin    ada    (also /admin/)"
        )
