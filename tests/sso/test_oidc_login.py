"""Single sign-on with OpenID Connect, against a real provider in its own process
(``tests/sso/provider/``): the authorization-code flow over HTTP, as a browser follows it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import requests
from auditlog.models import LogEntry
from django.contrib.auth import get_user_model
from django.utils import timezone

from portal.models import ExternalIdentity
from portal.roles import is_admin, is_finance
from queues.models import JobState, Team, TeamMembership
from queues.policy.apply import policy_apply
from queues.policy.export import dump_policy, policy_current
from tests.factories import JobFactory
from tests.sso.servers import provider_sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def teams_for(username: str) -> list[str]:
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

    _, page = sso_log_in("olga")

    assert page.status_code == 200
    assert page.url == f"{live_server.url}/chargeback/"  # finance lands on the statement
    olga = get_user_model().objects.get(username="olga")
    assert (olga.email, olga.first_name, olga.last_name) == ("olga@gpu.test", "Olga", "Ivanova")
    assert not olga.has_usable_password()
    assert teams_for("olga") == ["nlp"]
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


def logged_in_as(session: requests.Session, live_server) -> str | None:
    """Who the portal thinks the session is: the name in the top bar, or None (sent to log in)."""
    page = session.get(f"{live_server.url}/queues/", timeout=30, allow_redirects=False)
    if page.status_code == 302:
        return None
    found = re.search(r'<div class="who">\s*<span>([^<· ]+)', page.text)
    return found.group(1) if found else "?"


def test_a_group_change_moves_them_at_the_next_login_and_leaves_their_jobs_alone(
    example_policy, sso, sso_log_in, live_server
):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    sso_log_in("olga")
    olga = get_user_model().objects.get(username="olga")
    job = JobFactory(
        owner=olga,
        team=Team.objects.get(name="nlp"),
        state=JobState.RUNNING,
        started_at=timezone.now() - timedelta(minutes=5),
    )
    sso.person("olga", password="idp-tests-pw", groups=["gpu-vision", "gpu-admins"])

    session, page = sso_log_in("olga")

    assert page.status_code == 200
    assert page.url == f"{live_server.url}/manage/quotas/"  # admins land on the admin side
    assert (
        "Your groups at your identity provider changed: you joined vision; you left nlp (jobs "
        "you submitted there are left alone); you are now admin."
    ) in page.text
    assert teams_for("olga") == ["vision"]
    olga.refresh_from_db()
    assert olga.is_staff and olga.is_superuser
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    # She no longer sees nlp's jobs, but still the one she submitted there.
    assert session.get(f"{live_server.url}/jobs/{job.pk}/", timeout=30).status_code == 200
    left = LogEntry.objects.filter(object_repr="nlp", additional_data__source="login").latest("id")
    assert left.actor == olga
    assert left.changes_dict == {
        "members": {"type": "m2m", "operation": "delete", "objects": ["olga"]}
    }
    roles = LogEntry.objects.filter(object_repr="olga", additional_data__source="login").get()
    assert roles.changes_dict == {"admin": ["no", "yes"]}

    sso.person("olga", password="idp-tests-pw", groups=["gpu-vision"])
    sso_log_in("olga")

    olga.refresh_from_db()
    assert not olga.is_staff and not olga.is_superuser


def test_a_person_in_no_mapped_group_still_logs_in_and_is_told_they_are_in_no_team(
    example_policy, sso, sso_log_in, live_server
):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    sso_log_in("olga")
    sso.person("olga", password="idp-tests-pw", groups=[])

    session, page = sso_log_in("olga")

    assert page.status_code == 200
    assert page.url == f"{live_server.url}/queues/"
    assert (
        "You are in no team, so no queue is open to you. Teams come from the policy and from "
        "your groups at your identity provider: ask an admin to add you to one."
    ) in page.text
    assert teams_for("olga") == []
    assert logged_in_as(session, live_server) == "olga"


def test_members_the_policy_lists_keep_their_teams_and_groups_add_to_them(
    example_policy, sso, sso_log_in
):
    # mia is listed in vision and nlp; the policy made her account without a password, so her
    # first single sign-on takes it over.
    sso.person("mia", password="idp-tests-pw", groups=["gpu-nlp", "gpu-search"])

    _, page = sso_log_in("mia")

    assert page.status_code == 200
    assert teams_for("mia") == ["nlp", "search", "vision"]
    memberships = {
        m.team.name: (m.listed, m.via_groups)
        for m in TeamMembership.objects.filter(user__username="mia").select_related("team")
    }
    assert memberships == {
        "nlp": (True, True),
        "search": (False, True),
        "vision": (True, False),
    }
    # The export lists only whom the policy lists; applying it back changes nothing.
    exported = policy_current()
    assert "mia" not in exported["teams"]["search"]["members"]
    assert policy_apply(text=dump_policy(exported)).changed is False

    # The policy stops listing her in nlp: her group keeps her there.
    teams = {"nlp": {**exported["teams"]["nlp"], "members": ["nina", "noah"]}}
    policy_apply(text=dump_policy({"teams": teams}))
    assert teams_for("mia") == ["nlp", "search", "vision"]

    # Her groups change: she leaves search (a group gave it) and nlp (nobody lists her there
    # now), never vision (the policy lists her).
    sso.person("mia", password="idp-tests-pw", groups=[])
    sso_log_in("mia")
    assert teams_for("mia") == ["vision"]


REFUSALS = [
    (
        {"issuer": "https://impostor.example.org/o"},
        "token-issuer",
        "The answer came from another identity provider than the one this portal trusts.",
    ),
    (
        {"audience": "another-application"},
        "token-audience",
        "The identity provider&#x27;s answer was meant for another application, not this portal.",
    ),
    (
        {"expired": True},
        "token-expired",
        "The identity provider&#x27;s answer has expired. Try again; if it keeps happening, the "
        "clocks of the portal and the identity provider disagree.",
    ),
    (
        {"tamper": True},
        "token-signature",
        "The identity provider&#x27;s answer could not be verified, so the portal does not trust "
        "it.",
    ),
    (
        {"omit_groups": True},
        "groups-missing",
        "The identity provider did not say which groups you are in, so the portal cannot tell "
        "your teams and roles. Ask the identity provider&#x27;s administrators to release the "
        "&#x27;groups&#x27; claim to this portal.",
    ),
]


@pytest.mark.parametrize(("knobs", "code", "reason"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_a_token_the_portal_cannot_trust_is_refused_with_a_page_that_says_why(
    example_policy, sso, sso_log_in, live_server, knobs, code, reason
):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp", "gpu-admins"])
    sso.knobs(**knobs)

    session, page = sso_log_in("olga")

    assert page.status_code == 403
    assert page.url.startswith(f"{live_server.url}/login/sso/callback?")
    assert f'data-code="{code}"' in page.text
    assert "<h1>Login refused</h1>" in page.text
    assert f'<p class="error" role="alert">{reason}</p>' in page.text
    assert "You are not logged in, and nothing about you was changed." in page.text
    assert "Traceback" not in page.text
    assert not get_user_model().objects.filter(username="olga").exists()
    assert logged_in_as(session, live_server) is None


def test_a_refused_token_leaves_an_existing_person_as_they_were(
    example_policy, sso, sso_log_in, live_server
):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    sso_log_in("olga")
    sso.person("olga", password="idp-tests-pw", groups=["gpu-vision", "gpu-admins"])
    sso.knobs(tamper=True)

    _, page = sso_log_in("olga")

    assert page.status_code == 403
    assert teams_for("olga") == ["nlp"]
    assert not get_user_model().objects.get(username="olga").is_staff


def test_a_local_account_is_never_taken_over_by_single_sign_on(
    example_policy, sso, sso_log_in, live_server
):
    get_user_model().objects.create_user("ada", password="local-pw", is_staff=True)
    sso.person("ada", password="idp-tests-pw", groups=["gpu-nlp"])

    session, page = sso_log_in("ada")

    assert page.status_code == 403
    assert (
        "The portal has a local account named ada, with its own password, and a login through "
        "an identity provider or a directory never uses one. Ask an administrator to remove "
        "that account&#x27;s password (your next login then takes it over) or to rename it."
    ) in page.text
    assert logged_in_as(session, live_server) is None
    assert teams_for("ada") == []


def test_a_callback_this_session_did_not_start_is_refused(sso, live_server):
    page = requests.get(
        f"{live_server.url}/login/sso/callback?code=stolen-code&state=someone-elses", timeout=30
    )

    assert page.status_code == 400
    assert (
        "This login did not start here, or it has already been used. Start again from the "
        "login page."
    ) in page.text


def test_the_login_page_offers_single_sign_on_and_it_returns_to_the_page_asked_for(
    example_policy, sso, sso_log_in, live_server
):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    session = requests.Session()
    login = session.get(f"{live_server.url}/login/?next=/jobs/new", timeout=30)
    assert (
        '<a class="button primary" id="sso-login" href="/login/sso/?next=/jobs/new">'
        "Log in with single sign-on</a>"
    ) in login.text

    start = session.get(f"{live_server.url}/login/sso/?next=/jobs/new", timeout=30)
    page = provider_sign_in(session, start, username="olga", password="idp-tests-pw")

    assert page.status_code == 200
    assert page.url == f"{live_server.url}/jobs/new"


def test_logging_out_ends_the_portal_session(example_policy, sso, sso_log_in, live_server):
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    session, _ = sso_log_in("olga")
    assert logged_in_as(session, live_server) == "olga"

    page = session.post(
        f"{live_server.url}/logout/",
        headers={"X-CSRFToken": session.cookies["csrftoken"]},
        timeout=30,
    )

    assert page.url == f"{live_server.url}/login/"
    assert logged_in_as(session, live_server) is None
    # The provider's own session goes on: single sign-on logs in again without a password.
    _, again = sso_log_in("olga", session=session)
    assert again.url == f"{live_server.url}/queues/"


def test_logging_out_can_end_the_providers_session_too(
    settings, example_policy, sso, sso_log_in, live_server
):
    settings.OIDC_PROVIDER_LOGOUT = True
    sso.person("olga", password="idp-tests-pw", groups=["gpu-nlp"])
    session, _ = sso_log_in("olga")

    page = session.post(
        f"{live_server.url}/logout/",
        headers={"X-CSRFToken": session.cookies["csrftoken"]},
        timeout=30,
    )

    # Back from the provider's end-session (with the state the logout request carried).
    assert page.url.startswith(f"{live_server.url}/login/?state=")
    assert logged_in_as(session, live_server) is None
    again = session.get(f"{live_server.url}/login/sso/", timeout=30)
    assert again.url.startswith(f"{sso.url}/accounts/login/")  # asked for a password again
