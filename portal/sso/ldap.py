"""LDAP login (django-auth-ldap): the login form's username and password, checked against the
directory, and the person's groups there read for the policy's mapping like OpenID Connect's.

The same username rule as single sign-on holds (``portal.sso.identities``): a directory entry
never logs in as a local account with a password, nor as a user linked to another entry. Only
imported when ``LDAP_SERVER_URI`` is set (the settings add this backend then)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django_auth_ldap.backend import LDAPBackend

from portal.sso.identities import (
    Identity,
    LoginRefused,
    identity_link,
    identity_user_find,
    identity_verified_send,
)


def ldap_via() -> str:
    return f"LDAP {settings.LDAP_SERVER_URI}"


class PortalLDAPBackend(LDAPBackend):
    """django-auth-ldap's backend with the portal's username rule, the identity link and the
    groups handed to the policy's mapping."""

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[User, bool]:
        username = username.lower()  # a directory's uids ignore case; the portal's do not
        try:
            user = identity_user_find(
                issuer=settings.LDAP_SERVER_URI, subject=ldap_user.dn, username=username
            )
        except LoginRefused as refusal:
            request = getattr(ldap_user, "_request", None)
            if request is not None:
                # The login form shows it instead of "did not match".
                request.login_refusal = refusal
            raise ldap_user.AuthenticationFailed(refusal.detail) from refusal
        if user is None:
            return get_user_model()(username=username), True
        return user, False

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> User | None:
        user: User | None = ldap_user.authenticate(password)
        if user is None:
            return None
        searched = getattr(settings, "AUTH_LDAP_GROUP_SEARCH", None) is not None
        identity = Identity(
            issuer=settings.LDAP_SERVER_URI,
            subject=ldap_user.dn,
            username=user.get_username(),
            groups=frozenset(ldap_user.group_names) if searched else None,
            via=ldap_via(),
        )
        identity_link(user=user, identity=identity)
        identity_verified_send(ldap_user._request, user=user, identity=identity)
        return user
