"""Login throttling: too many failed logins for one username lock that username for a while.

The rule: ``LOGIN_FAILURE_LIMIT`` failed logins for a username within ``LOGIN_LOCKOUT_SECONDS``
of the first of them lock it until ``LOGIN_LOCKOUT_SECONDS`` after the failure that reached the
limit; while locked, every login for it is refused, with the right password too. A successful
login forgets earlier failures. The counts live in Django's default cache, which every web worker
shares (Redis when configured, else the database), so the limit holds across workers; while
the cache is unreachable logins are not counted (and a warning is logged) rather than refused.
Keyed on the username rather than the caller's address, so guessing from many addresses is
stopped too; the price is that someone can lock a known username out for the lock-out time.

Enforced in the authentication backend, so every way in that checks a password (the login page,
``/admin/``) is covered; the login form says why it refused.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from portal.throttling import CACHE_DOWN

logger = logging.getLogger(__name__)


def _key(username: str) -> str:
    # Hashed: a username may hold characters a cache key must not (spaces, control characters).
    digest = hashlib.sha256(username.casefold().encode("utf-8", "surrogatepass")).hexdigest()
    return f"login-failures:{digest}"


def _record(username: str) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] | None = cache.get(_key(username))
    except CACHE_DOWN as exc:
        # The cache only counts; logging in must not depend on it being up.
        logger.warning("login failures not read, the cache is unreachable: %s", exc)
        return None
    return record


def login_locked_until(username: str, *, now: datetime | None = None) -> datetime | None:
    """Until when logins for ``username`` are refused, or None if they are not (nor while the
    cache is unreachable)."""
    record = _record(username)
    if not record or record.get("locked_until") is None:
        return None
    until: datetime = record["locked_until"]
    return until if until > (now or timezone.now()) else None


def login_failure_record(username: str, *, now: datetime | None = None) -> None:
    """Count a failed login for ``username``; the failure that reaches the limit locks it.
    Failures while locked are not counted (the lock does not grow while someone keeps trying)."""
    now = now or timezone.now()
    window = timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS)
    record = _record(username) or {}
    if record.get("locked_until") and record["locked_until"] > now:
        return
    if not record or record["first"] + window <= now:
        record = {"first": now, "count": 0, "locked_until": None}
    record["count"] += 1
    if record["count"] >= settings.LOGIN_FAILURE_LIMIT:
        record["locked_until"] = now + window
    try:
        cache.set(_key(username), record, timeout=settings.LOGIN_LOCKOUT_SECONDS)
    except CACHE_DOWN as exc:
        logger.warning("login failure not counted, the cache is unreachable: %s", exc)


def login_success_record(username: str) -> None:
    """Forget the failures of ``username`` (it logged in with the right password)."""
    try:
        cache.delete(_key(username))
    except CACHE_DOWN as exc:
        logger.warning("login failures not forgotten, the cache is unreachable: %s", exc)


def lockout_message(until: datetime, *, now: datetime | None = None) -> str:
    minutes = max(1, math.ceil((until - (now or timezone.now())).total_seconds() / 60))
    return (
        f"Too many failed logins for this username: logging in is locked for {minutes} more "
        f"minute{'s' if minutes != 1 else ''}. Ask an administrator if you forgot your password."
    )


def password_login_allowed(user: Any) -> bool:
    """Whether ``user`` may log in with a password the portal keeps (``PASSWORD_LOGIN``):
    everyone (``all``), only superusers — the break-glass administrators — (``superusers``),
    or nobody (``off``). LDAP passwords are the directory's and not concerned."""
    mode = settings.PASSWORD_LOGIN
    return mode == "all" or (mode == "superusers" and bool(user.is_superuser))


class LoginThrottleBackend(ModelBackend):
    """Django's username-and-password backend, refusing a locked username before it checks the
    password, and a user whom ``PASSWORD_LOGIN`` keeps from using one (the next backend, LDAP,
    may still log them in)."""

    def user_can_authenticate(self, user: Any) -> bool:
        return super().user_can_authenticate(user) and password_login_allowed(user)

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        name = username if username is not None else kwargs.get(get_user_model().USERNAME_FIELD)
        if name and login_locked_until(str(name)):
            # Stops authenticate() at once: no other backend is asked, the password is not.
            raise PermissionDenied("locked out")
        return super().authenticate(request, username=username, password=password, **kwargs)


# Connected when this module is first imported: the admin (portal/admin.py) imports it while
# Django starts, before any request.
@receiver(user_login_failed, dispatch_uid="login-throttle-failed")
def on_login_failed(sender: Any, credentials: dict[str, Any], **kwargs: Any) -> None:
    username = credentials.get(get_user_model().USERNAME_FIELD) or credentials.get("username")
    if username:
        login_failure_record(str(username))


@receiver(user_logged_in, dispatch_uid="login-throttle-success")
def on_logged_in(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    login_success_record(user.get_username())


class ThrottledAuthenticationForm(AuthenticationForm):
    """The login form, saying so when a username is locked out instead of "did not match"."""

    locked_until: datetime | None = None
    # LDAP found the person, but the portal's username rule refused (portal.sso.identities).
    refused: bool = False

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except forms.ValidationError:
            refusal = getattr(self.request, "login_refusal", None)
            if refusal is not None:
                self.refused = True
                raise forms.ValidationError(refusal.reason, code="refused") from None
            username = self.cleaned_data.get("username")
            self.locked_until = login_locked_until(str(username)) if username else None
            if self.locked_until is None:
                raise
            raise forms.ValidationError(
                lockout_message(self.locked_until), code="locked_out"
            ) from None


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm, ThrottledAuthenticationForm):
    """The admin site's login form, with the same lock-out message."""
