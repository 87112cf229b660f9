"""Who may open the admin side: admins; finance may also read the audit log.

Anonymous visitors are sent to log in; a signed-in member or finance user gets 403."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from portal.roles import is_admin, is_finance

View = Callable[..., HttpResponse]


def _requires(check: Callable[[Any], bool]) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not check(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


admin_required = _requires(is_admin)
audit_reader_required = _requires(is_finance)  # finance, and admins (is_finance includes them)
