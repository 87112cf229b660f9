"""Single sign-on with OpenID Connect, against a real provider in its own process
(``tests/sso/provider/``): the authorization-code flow over HTTP, as a browser follows it."""

from __future__ import annotations

import pytest
from auditlog.models import LogEntry
from django.contrib.auth import get_user_model

from portal.models import ExternalIdentity
from portal.roles import is_admin, is_finance
from queues.models import Team

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def teams_of(username: str) -> list[str]:
    return sorted(Team.objects.filter(members__username=username).values_list("name", flat=True))


def test_a_first_login_creates_the_user_with_the_teams_and_role_of_their_groups(
    example_policy, sso, sso_log_in, live_server
):
    sso.person(
        "olga",
        password="idp-tests-pw",
        groups=["gpu-nlp", "finance-gpu", "unmapped-group"],
        email="olga@gpu.test",
        first_name="Olga",
        last_name="Ivanova",
    )

    session, page = sso_log_in("olga")

    assert page.status_code == 200
    assert page.url == f"{live_server.url}/chargeback/"  # finance lands on the statement
    olga = get_user_model().objects.get(username="olga")
    assert (olga.email, olga.first_name, olga.last_name) == ("olga@gpu.test", "Olga", "Ivanova")
    assert not olga.has_usable_password()
    assert teams_of("olga") == ["nlp"]
    assert is_finance(olga) and not is_admin(olga)
    link = ExternalIdentity.objects.get(user=olga)
    assert (link.issuer, link.groups) == (sso.issuer, ["finance-gpu", "gpu-nlp", "unmapped-group"])
    joined = LogEntry.objects.get(object_repr="nlp", additional_data__source="login")
    assert joined.actor == olga
    assert joined.changes_dict == {
        "members": {"type": "m2m", "operation": "add", "objects": ["olga"]}
    }
    assert joined.additional_data["via"] == f"OpenID Connect {sso.issuer}"
    assert (
        "Your groups at your identity provider changed: you joined nlp; you are now finance."
        in page.text
    )
