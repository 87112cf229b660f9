"""django-auth-ldap's settings from the portal's few LDAP variables (read in
``portal/settings.py``; the tests build theirs with the same function). Imports no model: the
settings module imports it."""

from __future__ import annotations

from typing import Any

import ldap
from django_auth_ldap.config import (
    GroupOfNamesType,
    GroupOfUniqueNamesType,
    LDAPSearch,
    PosixGroupType,
)

GROUP_TYPES = {
    "groupOfNames": GroupOfNamesType,
    "groupOfUniqueNames": GroupOfUniqueNamesType,
    "posixGroup": PosixGroupType,
}


def ldap_auth_settings(
    *,
    server_uri: str,
    start_tls: bool,
    bind_dn: str,
    bind_password: str,
    user_search_base: str,
    user_filter: str,
    group_search_base: str,
    group_type: str,
    timeout_seconds: float,
) -> dict[str, Any]:
    """The ``AUTH_LDAP_*`` settings: people found under ``user_search_base`` with
    ``user_filter``, their groups (by ``cn``, the names the policy maps) under
    ``group_search_base`` when given. Raises ``ValueError`` naming a wrong group type."""
    if group_type not in GROUP_TYPES:
        raise ValueError(
            f"LDAP_GROUP_TYPE={group_type!r}: expected one of {', '.join(GROUP_TYPES)}"
        )
    result: dict[str, Any] = {
        "AUTH_LDAP_SERVER_URI": server_uri,
        "AUTH_LDAP_START_TLS": start_tls,
        "AUTH_LDAP_BIND_DN": bind_dn,
        "AUTH_LDAP_BIND_PASSWORD": bind_password,
        "AUTH_LDAP_USER_SEARCH": LDAPSearch(user_search_base, ldap.SCOPE_SUBTREE, user_filter),
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        # Names and e-mail addresses follow the directory at every login.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: timeout_seconds,
            ldap.OPT_TIMEOUT: timeout_seconds,
        },
        # Without a group search the person's groups are unknown (not "none"): the login then
        # leaves their teams and roles alone.
        "AUTH_LDAP_GROUP_SEARCH": None,
    }
    if group_search_base:
        result["AUTH_LDAP_GROUP_SEARCH"] = LDAPSearch(
            group_search_base, ldap.SCOPE_SUBTREE, f"(objectClass={group_type})"
        )
        result["AUTH_LDAP_GROUP_TYPE"] = GROUP_TYPES[group_type](name_attr="cn")
    return result
