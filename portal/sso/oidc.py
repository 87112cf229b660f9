"""OpenID Connect login: the authorization-code flow against ``OIDC_ISSUER`` (Authlib).

Authlib reads the provider's discovery document, makes the authorization request (state, nonce
and PKCE kept in the session), exchanges the code and verifies the ID token's signature with the
provider's published keys (JWKS, fetched again when a token names an unknown key). What the
portal asks of the token on top is stated here, in ``id_token_checks``: issued by
``OIDC_ISSUER``, for ``OIDC_CLIENT_ID``, not expired, with a subject — and, in
``identity_from_claims``, a username and the groups claim. A token that fails any check is
refused with the reason (``LoginRefused``); nothing is stored and nobody is logged in.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import requests
from authlib.integrations.base_client import MismatchingStateError, OAuthError
from authlib.integrations.django_client import DjangoIntegration, DjangoOAuth2App
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from joserfc.errors import (
    ClaimError,
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)

from portal.sso.identities import Identity, LoginRefused, identity_user, identity_verified_send

logger = logging.getLogger(__name__)

# Clocks differ a little: an ID token counts as unexpired this long after its "exp".
ID_TOKEN_LEEWAY_SECONDS = 60
# Signatures the portal accepts: public-key ones only (a provider's JWKS holds public keys; a
# token "signed" with "none" or the client secret is refused).
SIGNING_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


def oidc_enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


def oidc_via() -> str:
    """The provider in words, for the audit log."""
    return f"OpenID Connect {settings.OIDC_ISSUER}"


@functools.cache
def _client(
    issuer: str, client_id: str, client_secret: str, scopes: str, timeout: float
) -> DjangoOAuth2App:
    # One client per configuration: it caches the discovery document and the keys.
    return DjangoOAuth2App(
        DjangoIntegration("oidc"),
        name="oidc",
        client_id=client_id,
        client_secret=client_secret,
        server_metadata_url=f"{issuer}/.well-known/openid-configuration",
        client_kwargs={
            "scope": scopes,
            "code_challenge_method": "S256",
            "default_timeout": timeout,
        },
    )


def oidc_client() -> DjangoOAuth2App:
    """The configured provider's client, its discovery document loaded and checked: it must
    name ``OIDC_ISSUER`` as its issuer (OpenID Connect Discovery §4.3)."""
    client = _client(
        settings.OIDC_ISSUER,
        settings.OIDC_CLIENT_ID,
        settings.OIDC_CLIENT_SECRET,
        settings.OIDC_SCOPES,
        settings.OIDC_TIMEOUT_SECONDS,
    )
    try:
        metadata = client.load_server_metadata()
    except (requests.RequestException, ValueError) as exc:
        raise _unreachable(exc) from exc
    if metadata.get("issuer") != settings.OIDC_ISSUER:
        client.server_metadata.clear()  # read it again next time
        raise LoginRefused(
            "provider-misconfigured",
            "The identity provider this portal is set up for does not answer as expected, so "
            "nobody can log in with it now. Tell the portal's administrators.",
            detail=f"the discovery document's issuer {metadata.get('issuer')!r} is not "
            f"OIDC_ISSUER {settings.OIDC_ISSUER!r}",
            status=502,
        )
    offered = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
    metadata["id_token_signing_alg_values_supported"] = [
        a for a in offered if a in SIGNING_ALGORITHMS
    ] or ["RS256"]
    return client


def _unreachable(exc: Exception) -> LoginRefused:
    return LoginRefused(
        "unreachable",
        "The identity provider cannot be reached just now. Try again in a minute.",
        detail=f"{type(exc).__name__}: {exc}",
        status=502,
    )


def oidc_authorize_redirect(request: HttpRequest, *, redirect_uri: str) -> HttpResponse:
    """The redirect to the provider's login, with a new state, nonce and PKCE verifier kept in
    the session."""
    try:
        response: HttpResponse = oidc_client().authorize_redirect(request, redirect_uri)
    except requests.RequestException as exc:
        raise _unreachable(exc) from exc
    return response


def id_token_checks() -> dict[str, dict[str, Any]]:
    """What the portal requires of an ID token's claims, beyond its signature and nonce."""
    return {
        "iss": {"essential": True, "value": settings.OIDC_ISSUER},
        "aud": {"essential": True, "value": settings.OIDC_CLIENT_ID},
        "exp": {"essential": True},
        "sub": {"essential": True},
    }


def oidc_callback_identity(request: HttpRequest) -> tuple[Identity, str]:
    """The person the provider's redirect back vouches for, and the raw ID token. Exchanges the
    code for tokens and verifies the ID token; raises ``LoginRefused`` saying which check
    failed."""
    client = oidc_client()
    try:
        token = client.authorize_access_token(
            request, claims_options=id_token_checks(), leeway=ID_TOKEN_LEEWAY_SECONDS
        )
    except MismatchingStateError as exc:
        raise LoginRefused(
            "state",
            "This login did not start here, or it has already been used. Start again from the "
            "login page.",
            detail="the state parameter is missing or unknown in this session",
            status=400,
        ) from exc
    except OAuthError as exc:
        raise LoginRefused(
            "provider-error",
            f"The identity provider did not log you in ({exc.error}).",
            detail=exc.description or "",
        ) from exc
    except requests.RequestException as exc:
        raise _unreachable(exc) from exc
    except ClaimError as exc:
        raise _claim_refusal(exc) from exc
    except (JoseError, ValueError) as exc:
        raise LoginRefused(
            "token-signature",
            "The identity provider's answer could not be verified, so the portal does not "
            "trust it.",
            detail=f"the ID token does not verify with the provider's keys ({type(exc).__name__}: "
            f"{exc})",
        ) from exc
    claims = token.get("userinfo")
    if not claims or not token.get("id_token"):
        raise LoginRefused(
            "no-id-token",
            "The identity provider did not say who you are (it sent no ID token).",
            detail=f"no id_token in the token response; scopes asked: {settings.OIDC_SCOPES}",
        )
    return identity_from_claims(dict(claims)), str(token["id_token"])


def _claim_refusal(exc: ClaimError) -> LoginRefused:
    claim = exc.claim
    if isinstance(exc, ExpiredTokenError):
        return LoginRefused(
            "token-expired",
            "The identity provider's answer has expired. Try again; if it keeps happening, the "
            "clocks of the portal and the identity provider disagree.",
            detail=f"the ID token's exp is more than {ID_TOKEN_LEEWAY_SECONDS} s in the past",
        )
    if isinstance(exc, InvalidClaimError) and claim == "iss":
        return LoginRefused(
            "token-issuer",
            "The answer came from another identity provider than the one this portal trusts.",
            detail=f"the ID token's issuer is not OIDC_ISSUER {settings.OIDC_ISSUER!r}",
        )
    if isinstance(exc, InvalidClaimError) and claim in ("aud", "azp"):
        return LoginRefused(
            "token-audience",
            "The identity provider's answer was meant for another application, not this portal.",
            detail=f"the ID token's {claim} is not OIDC_CLIENT_ID {settings.OIDC_CLIENT_ID!r}",
        )
    if claim == "nonce":
        return LoginRefused(
            "token-nonce",
            "The identity provider's answer does not belong to this login. Start again from "
            "the login page.",
            detail="the ID token's nonce is not the one this login sent",
        )
    what = "lacks" if isinstance(exc, MissingClaimError) else "has an invalid"
    return LoginRefused(
        "token-invalid",
        "The identity provider's answer is incomplete or invalid, so the portal does not trust it.",
        detail=f"the ID token {what} {claim!r} claim",
    )


def identity_from_claims(claims: dict[str, Any]) -> Identity:
    """The person a verified ID token names: its issuer and subject, the username claim and
    the groups claim. Refuses a token without a usable username, and one without the groups
    claim: a provider that does not tell the groups does not get them read as "no group"."""
    username = claims.get(settings.OIDC_USERNAME_CLAIM)
    if not isinstance(username, str) or not username:
        raise LoginRefused(
            "username-missing",
            "The identity provider did not tell the portal your username.",
            detail=f"no {settings.OIDC_USERNAME_CLAIM!r} claim (OIDC_USERNAME_CLAIM) in the ID "
            "token",
        )
    groups: frozenset[str] | None = None
    if settings.OIDC_GROUPS_CLAIM:
        raw = claims.get(settings.OIDC_GROUPS_CLAIM)
        if raw is None:
            raise LoginRefused(
                "groups-missing",
                "The identity provider did not say which groups you are in, so the portal "
                "cannot tell your teams and roles. Ask the identity provider's administrators "
                f"to release the {settings.OIDC_GROUPS_CLAIM!r} claim to this portal.",
                detail=f"no {settings.OIDC_GROUPS_CLAIM!r} claim (OIDC_GROUPS_CLAIM) in the ID "
                f"token; the portal asks for the scopes {settings.OIDC_SCOPES!r}",
            )
        if not isinstance(raw, list) or not all(isinstance(g, str) for g in raw):
            raise LoginRefused(
                "groups-invalid",
                "The identity provider's list of your groups is not one the portal can read.",
                detail=f"the {settings.OIDC_GROUPS_CLAIM!r} claim is not a list of group names",
            )
        groups = frozenset(raw)
    return Identity(
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        username=username,
        groups=groups,
        via=oidc_via(),
        email=str(claims.get("email") or ""),
        first_name=str(claims.get("given_name") or ""),
        last_name=str(claims.get("family_name") or ""),
    )


def oidc_logout_url(*, id_token: str, post_logout_redirect_uri: str) -> str | None:
    """The provider's end-session URL (RP-initiated logout) when ``OIDC_PROVIDER_LOGOUT`` is on
    and the provider offers one; else None (the portal's own session ends either way)."""
    if not (oidc_enabled() and settings.OIDC_PROVIDER_LOGOUT and id_token):
        return None
    try:
        client = oidc_client()
    except LoginRefused as exc:
        logger.warning("logout at the identity provider skipped: %s", exc)
        return None
    if not client.server_metadata.get("end_session_endpoint"):
        return None
    result = client.create_logout_url(
        post_logout_redirect_uri=post_logout_redirect_uri,
        id_token_hint=id_token,
        client_id=settings.OIDC_CLIENT_ID,
    )
    url: str = result["url"]
    return url


class OidcBackend(ModelBackend):
    """Logs in the person an identity provider vouched for (``authenticate(request,
    identity=…)`` after the callback verified the ID token); never looks at a password."""

    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, identity: Identity | None = None, **kwargs: Any
    ) -> User | None:
        if identity is None:
            return None
        user = identity_user(identity)
        identity_verified_send(request, user=user, identity=identity)
        return user
