from django.contrib import admin

from portal.login_throttle import ThrottledAdminAuthenticationForm
from portal.models import ApiToken

# The admin's login says so when a username is locked out (portal.login_throttle).
admin.site.login_form = ThrottledAdminAuthenticationForm


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "key_prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username"]
    readonly_fields = ["key_prefix", "created_at", "last_used_at"]
