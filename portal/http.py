"""The request type views see behind ``login_required`` and django-htmx's middleware."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails
from rest_framework.exceptions import NotAuthenticated


class PortalRequest(HttpRequest):
    """A signed-in user's request: ``user`` is a real user (``login_required`` saw to it) and
    ``htmx`` tells whether htmx sent it (the middleware set it)."""

    user: User
    htmx: HtmxDetails


def signed_in(user: object) -> User:
    """The request's user as a real user, for API views whose permission already requires one
    (a job token's principal or an anonymous user never reach them)."""
    if not isinstance(user, User):
        raise NotAuthenticated()
    return user
