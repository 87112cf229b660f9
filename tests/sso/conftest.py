"""Fixtures for logging in against real identity providers: the test OpenID Connect provider and
slapd, each started once per test process; the portal pointed at them per test.

The example policy maps groups to teams (``gpu-vision`` → vision, ``gpu-nlp`` → nlp, …) and to
roles (``finance-gpu`` → finance, ``gpu-admins`` → admin)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.sso.servers import OidcProvider, Slapd, provider_sign_in

CLIENT_ID = "gpu-portal"
PASSWORD = "idp-tests-pw"  # the test provider's and slapd's throwaway people only


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProvider]:
    provider = OidcProvider().start()
    yield provider
    provider.stop()


@pytest.fixture
def sso(settings, live_server, oidc_provider: OidcProvider) -> OidcProvider:
    """The portal (its live server) registered at the test provider and set up to log in with
    it; the provider behaves (no knobs)."""
    secret = secrets.token_urlsafe(24)
    oidc_provider.register_client(
        client_id=CLIENT_ID,
        client_secret=secret,
        redirect_uri=f"{live_server.url}/login/sso/callback",
        post_logout_uri=f"{live_server.url}/login/",
    )
    oidc_provider.knobs()
    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = secret
    settings.OIDC_SCOPES = "openid email profile groups"
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_PROVIDER_LOGOUT = False
    # The live server speaks plain HTTP, and requests (unlike a browser on localhost) sends no
    # secure cookie over it.
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False
    return oidc_provider


SsoLogIn = Callable[..., tuple[requests.Session, requests.Response]]


@pytest.fixture
def sso_log_in(live_server, sso: OidcProvider) -> SsoLogIn:
    """``sso_log_in("olga")``: a browser-like session clicks single sign-on on the portal's
    login page, signs in at the provider and follows every redirect back; returns the session
    and the last response (the page the person lands on, or the refusal)."""

    def log_in(
        username: str, *, password: str = PASSWORD, session: requests.Session | None = None
    ) -> tuple[requests.Session, requests.Response]:
        session = session or requests.Session()
        response = session.get(f"{live_server.url}/login/sso/", timeout=30)
        if response.url.startswith(sso.url):  # the provider asks who it is
            response = provider_sign_in(session, response, username=username, password=password)
        return session, response

    return log_in


@pytest.fixture(scope="session")
def slapd() -> Iterator[Slapd]:
    server = Slapd().start()
    yield server
    server.stop()
