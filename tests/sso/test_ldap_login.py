"""LDAP login against Debian's slapd, started by the fixture with people and groups of its own:
the login form's username and password go to the directory, the person's groups there go
through the same policy mapping as single sign-on's."""

from __future__ import annotations

import pytest
from auditlog.models import LogEntry
from django.contrib.auth import get_user_model

from portal.models import ExternalIdentity
from portal.roles import is_finance
from portal.sso.ldap_config import ldap_auth_settings
from queues.models import Team
from tests.sso.conftest import PASSWORD
from tests.sso.servers import Slapd

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def directory(slapd: Slapd) -> Slapd:
    """Lena (nlp, finance) and Leo (vision) in the directory."""
    slapd.person("lena", password=PASSWORD, given="Lena", surname="Lindqvist")
    slapd.person("leo", password=PASSWORD, given="Leo", surname="Larsen")
    slapd.person("ada", password=PASSWORD, given="Ada", surname="Directory")
    slapd.group("gpu-nlp", ["lena"])
    slapd.group("gpu-vision", ["leo", "ada"])
    slapd.group("finance-gpu", ["lena"])
    return slapd


@pytest.fixture
def ldap_login(settings, directory: Slapd) -> Slapd:
    """The portal set up as docs/operations.md tells an operator: the directory's address, an
    anonymous search for people and for groupOfNames groups."""
    configured = ldap_auth_settings(
        server_uri=directory.uri,
        start_tls=False,
        bind_dn="",
        bind_password="",
        user_search_base=f"ou=people,{directory.suffix}",
        user_filter="(uid=%(user)s)",
        group_search_base=f"ou=groups,{directory.suffix}",
        group_type="groupOfNames",
        timeout_seconds=5.0,
    )
    for name, value in configured.items():
        setattr(settings, name, value)
    settings.LDAP_SERVER_URI = directory.uri
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "portal.sso.ldap.PortalLDAPBackend",
    ]
    return directory


def teams_for(username: str) -> list[str]:
    return sorted(Team.objects.filter(members__username=username).values_list("name", flat=True))


def log_in(client, username: str, password: str = PASSWORD):
    return client.post("/login/", {"username": username, "password": password})


def test_a_first_ldap_login_creates_the_user_with_the_teams_and_role_of_their_groups(
    example_policy, ldap_login, client
):
    response = log_in(client, "lena")

    assert response.status_code == 302
    assert response["Location"] == "/chargeback/"
    lena = get_user_model().objects.get(username="lena")
    assert (lena.first_name, lena.last_name, lena.email) == ("Lena", "Lindqvist", "lena@gpu.test")
    assert not lena.has_usable_password()
    assert teams_for("lena") == ["nlp"]
    assert is_finance(lena)
    link = ExternalIdentity.objects.get(user=lena)
    assert (link.issuer, link.subject) == (ldap_login.uri, ldap_login.person_dn("lena"))
    assert link.groups == ["finance-gpu", "gpu-nlp"]
    joined = LogEntry.objects.get(object_repr="nlp", additional_data__source="login")
    assert joined.additional_data["via"] == f"LDAP {ldap_login.uri}"
    assert client.get("/queues/").status_code == 200


def test_a_group_change_in_the_directory_moves_them_at_the_next_login(
    example_policy, ldap_login, client
):
    log_in(client, "leo")
    assert teams_for("leo") == ["vision"]
    ldap_login.group_members("gpu-vision", ["ada"])
    ldap_login.group_members("gpu-nlp", ["lena", "leo"])
    try:
        client.logout()
        response = log_in(client, "leo")
    finally:
        ldap_login.group_members("gpu-vision", ["leo", "ada"])
        ldap_login.group_members("gpu-nlp", ["lena"])

    assert response.status_code == 302
    assert teams_for("leo") == ["nlp"]
    page = client.get("/queues/")
    assert (
        "Your groups at your identity provider changed: you joined nlp; you left vision (jobs "
        "you submitted there are left alone)."
    ) in page.content.decode()


def test_a_wrong_directory_password_is_refused_like_any_other(example_policy, ldap_login, client):
    response = log_in(client, "lena", "not-her-password")

    assert response.status_code == 200
    assert "Your username and password didn't match. Please try again." in (
        response.content.decode()
    )
    assert not get_user_model().objects.filter(username="lena").exists()


def test_a_directory_entry_never_logs_in_as_a_local_account(example_policy, ldap_login, client):
    get_user_model().objects.create_user("ada", password="local-pw", is_staff=True)

    response = log_in(client, "ada")

    assert response.status_code == 200
    assert (
        "The portal has a local account named ada, with its own password, and a login through "
        "an identity provider or a directory never uses one."
    ) in response.content.decode()
    assert client.get("/queues/").status_code == 302


def test_without_a_group_search_the_directory_leaves_teams_and_roles_alone(
    settings, example_policy, ldap_login, client
):
    settings.AUTH_LDAP_GROUP_SEARCH = None
    response = log_in(client, "lena")

    assert response.status_code == 302
    assert teams_for("lena") == []
    assert ExternalIdentity.objects.get(user__username="lena").groups == []
