"""Single sign-on without a provider running: the username rule, reading a verified token's
claims, who may still use a local password, the login page, a provider that cannot be reached,
and settings that refuse a wrong configuration. (Logins against real servers: tests/sso/.)"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from portal.models import ExternalIdentity
from portal.sso.identities import Identity, LoginRefused, identity_user
from portal.sso.oidc import identity_from_claims
from tests.faults.processes import free_port
from tests.portal.test_settings import load_settings

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example.org"


def identity(username: str = "olga", subject: str = "sub-1", **fields) -> Identity:
    return Identity(
        issuer=ISSUER,
        subject=subject,
        username=username,
        groups=frozenset(),
        via=f"OpenID Connect {ISSUER}",
        **fields,
    )


def refusal(who: Identity) -> LoginRefused:
    with pytest.raises(LoginRefused) as excinfo:
        identity_user(who)
    return excinfo.value


class TestTheUsernameRule:
    def test_a_new_person_gets_a_new_user_without_a_password(self):
        user = identity_user(identity(email="olga@example.org", first_name="Olga"))

        assert (user.username, user.email, user.first_name) == ("olga", "olga@example.org", "Olga")
        assert not user.has_usable_password()
        assert ExternalIdentity.objects.get(user=user).subject == "sub-1"

    def test_a_user_the_policy_created_without_a_password_is_taken_over(self):
        listed = get_user_model().objects.create_user("mia", password=None)

        assert identity_user(identity("mia")) == listed

    def test_the_link_decides_later_logins_whatever_the_username_says_now(self):
        first = identity_user(identity("olga"))

        assert identity_user(identity("olga.ivanova")) == first
        assert not get_user_model().objects.filter(username="olga.ivanova").exists()

    def test_a_local_account_with_a_password_is_refused(self):
        get_user_model().objects.create_user("ada", password="break-glass", is_superuser=True)

        refused = refusal(identity("ada"))

        assert (refused.code, refused.status) == ("local-account", 403)
        assert not ExternalIdentity.objects.exists()

    def test_a_username_another_person_of_the_issuer_holds_is_refused(self):
        identity_user(identity("olga", subject="sub-1"))

        refused = refusal(identity("olga", subject="sub-2"))

        assert refused.code == "taken"
        assert refused.reason == (
            "The portal account olga belongs to another person at your identity provider, so "
            "you cannot log in as it. Ask an administrator."
        )

    def test_another_provider_may_take_over_a_user_it_has_no_link_for(self):
        user = identity_user(identity("olga"))
        ldap = Identity(
            issuer="ldap://ldap.example.org",
            subject="uid=olga,ou=people,dc=example,dc=org",
            username="olga",
            groups=None,
            via="LDAP ldap://ldap.example.org",
        )

        assert identity_user(ldap) == user
        assert ExternalIdentity.objects.filter(user=user).count() == 2

    def test_a_deactivated_user_is_refused(self):
        get_user_model().objects.create_user("olga", password=None, is_active=False)

        assert refusal(identity("olga")).code == "inactive"

    def test_a_username_django_cannot_hold_is_refused(self):
        refused = refusal(identity("olga ivanova"))

        assert refused.code == "username-invalid"
        assert not get_user_model().objects.exists()


CLAIMS = {"iss": ISSUER, "sub": "sub-1", "preferred_username": "olga", "groups": ["gpu-nlp"]}


class TestReadingTheClaims:
    @pytest.fixture(autouse=True)
    def provider(self, settings):
        settings.OIDC_ISSUER = ISSUER
        settings.OIDC_GROUPS_CLAIM = "groups"
        settings.OIDC_USERNAME_CLAIM = "preferred_username"

    def test_it_reads_the_username_and_groups(self):
        read = identity_from_claims({**CLAIMS, "email": "olga@example.org"})

        assert (read.username, read.groups, read.email) == (
            "olga",
            frozenset({"gpu-nlp"}),
            "olga@example.org",
        )

    def test_no_groups_claim_is_refused_never_read_as_no_group(self):
        claims = {k: v for k, v in CLAIMS.items() if k != "groups"}

        with pytest.raises(LoginRefused) as excinfo:
            identity_from_claims(claims)

        assert excinfo.value.code == "groups-missing"

    def test_an_empty_groups_claim_is_no_group(self):
        assert identity_from_claims({**CLAIMS, "groups": []}).groups == frozenset()

    @pytest.mark.parametrize("groups", ["gpu-nlp", [1, 2], {"gpu-nlp": True}])
    def test_a_groups_claim_that_is_not_a_list_of_names_is_refused(self, groups):
        with pytest.raises(LoginRefused) as excinfo:
            identity_from_claims({**CLAIMS, "groups": groups})

        assert excinfo.value.code == "groups-invalid"

    def test_no_username_claim_is_refused(self):
        with pytest.raises(LoginRefused) as excinfo:
            identity_from_claims({**CLAIMS, "preferred_username": None})

        assert excinfo.value.code == "username-missing"

    def test_without_a_groups_claim_configured_groups_are_not_read(self, settings):
        settings.OIDC_GROUPS_CLAIM = ""
        assert identity_from_claims(CLAIMS).groups is None

    def test_the_username_claim_is_configurable(self, settings):
        settings.OIDC_USERNAME_CLAIM = "email"
        assert identity_from_claims({**CLAIMS, "email": "olga@example.org"}).username == (
            "olga@example.org"
        )


class TestPasswordLogin:
    @pytest.fixture
    def people(self, db):
        users = get_user_model().objects
        return (
            users.create_user("mia", password="pw-for-tests"),
            users.create_superuser("root", password="pw-for-tests"),
        )

    def log_in(self, client, username: str):
        return client.post("/login/", {"username": username, "password": "pw-for-tests"})

    def test_all_lets_everyone_with_a_password_in(self, client, people):
        assert self.log_in(client, "mia").status_code == 302

    def test_superusers_lets_only_the_break_glass_administrators_in(self, settings, client, people):
        settings.PASSWORD_LOGIN = "superusers"
        refused = self.log_in(client, "mia")
        assert refused.status_code == 200
        assert "Your username and password didn't match." in refused.content.decode()

        assert self.log_in(client, "root").status_code == 302

    def test_off_lets_nobody_in_with_a_password_not_even_the_admin_site(
        self, settings, client, people
    ):
        settings.PASSWORD_LOGIN = "off"
        assert self.log_in(client, "root").status_code == 200
        admin = client.post(
            "/admin/login/?next=/admin/", {"username": "root", "password": "pw-for-tests"}
        )
        assert admin.status_code == 200
        assert client.get("/queues/").status_code == 302

    def test_switching_passwords_off_ends_the_sessions_they_opened(self, settings, client, people):
        self.log_in(client, "mia")
        assert client.get("/queues/").status_code == 200

        settings.PASSWORD_LOGIN = "off"

        assert client.get("/queues/").status_code == 302

    def test_with_single_sign_on_the_login_page_offers_it_and_keeps_the_form_for_break_glass(
        self, settings, client
    ):
        settings.PASSWORD_LOGIN = "superusers"
        settings.OIDC_ISSUER = ISSUER
        page = client.get("/login/").content.decode()

        assert '<a class="button primary" id="sso-login" href="/login/sso/">' in page
        assert "<summary>Break-glass administrators</summary>" in page
        assert "Passwords kept by the portal work here only for break-glass administrators." in page

    def test_without_single_sign_on_the_login_page_is_the_password_form(self, client):
        page = client.get("/login/").content.decode()

        assert "sso-login" not in page
        assert "<summary>" not in page
        assert '<button type="submit">Log in</button>' in page


def test_a_provider_that_cannot_be_reached_is_a_page_that_says_so(client):
    closed = f"http://127.0.0.1:{free_port()}"
    with override_settings(OIDC_ISSUER=closed, OIDC_CLIENT_ID="portal", OIDC_CLIENT_SECRET="s"):
        response = client.get("/login/sso/")

    assert response.status_code == 502
    assert (
        "The identity provider cannot be reached just now. Try again in a minute."
        in response.content.decode()
    )


def test_the_single_sign_on_pages_do_not_exist_without_a_provider(client):
    assert client.get("/login/sso/").status_code == 404
    assert client.get("/login/sso/callback?code=x&state=y").status_code == 404


class TestSettings:
    def test_an_issuer_over_plain_http_elsewhere_is_refused(self, tmp_path):
        result = load_settings(
            DEBUG="true",
            PORTAL_VAR_DIR=str(tmp_path),
            OIDC_ISSUER="http://idp.example.org",
            OIDC_CLIENT_ID="portal",
            OIDC_CLIENT_SECRET="secret",
        )

        assert result.returncode != 0
        assert (
            "OIDC_ISSUER='http://idp.example.org': expected an https:// URL (http:// only for a "
            "provider on this machine)"
        ) in result.stderr

    def test_an_issuer_without_a_client_is_refused(self, tmp_path):
        result = load_settings(
            DEBUG="true", PORTAL_VAR_DIR=str(tmp_path), OIDC_ISSUER="https://idp.example.org"
        )

        assert result.returncode != 0
        assert "OIDC_ISSUER is set: set OIDC_CLIENT_ID and OIDC_CLIENT_SECRET too" in result.stderr

    def test_an_unknown_password_login_mode_is_refused(self, tmp_path):
        result = load_settings(DEBUG="true", PORTAL_VAR_DIR=str(tmp_path), PASSWORD_LOGIN="some")

        assert result.returncode != 0
        assert "PASSWORD_LOGIN='some': expected one of all, superusers, off" in result.stderr

    def test_ldap_comes_from_the_environment(self, tmp_path):
        result = load_settings(
            DEBUG="true",
            PORTAL_VAR_DIR=str(tmp_path),
            LDAP_SERVER_URI="ldaps://ldap.example.org",
            LDAP_USER_SEARCH_BASE="ou=people,dc=example,dc=org",
            LDAP_GROUP_SEARCH_BASE="ou=groups,dc=example,dc=org",
            LDAP_GROUP_TYPE="posixGroup",
        )

        assert result.returncode == 0, result.stderr

    def test_an_unknown_ldap_group_type_is_refused(self, tmp_path):
        result = load_settings(
            DEBUG="true",
            PORTAL_VAR_DIR=str(tmp_path),
            LDAP_SERVER_URI="ldaps://ldap.example.org",
            LDAP_USER_SEARCH_BASE="ou=people,dc=example,dc=org",
            LDAP_GROUP_TYPE="posixgroup",
        )

        assert result.returncode != 0
        assert (
            "LDAP_GROUP_TYPE='posixgroup': expected one of groupOfNames, groupOfUniqueNames, "
            "posixGroup"
        ) in result.stderr
