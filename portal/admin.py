from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.login_throttle import ThrottledAdminAuthenticationForm
from portal.models import ApiToken

# The admin's login says so when a username is locked out (portal.login_throttle).
admin.site.login_form = ThrottledAdminAuthenticationForm


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens to look at and revoke. They are issued only where their secret can be shown once,
    on the owner's /tokens/ page (``ApiToken.issue``): a token added here would have no key (an
    empty hash: unusable, and a second one clashed with the first)."""

    list_display = ["name", "user", "key_prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username"]
    fields = ["user", "name", "key_prefix", "created_at", "last_used_at", "revoked_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Only the revocation is an admin's to change; who owns a token and its name are not.
        return ["user", "name", "key_prefix", "created_at", "last_used_at"]
