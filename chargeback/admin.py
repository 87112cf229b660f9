from django.contrib import admin

from chargeback.models import RateCard, RateCardWeight


class RateCardWeightInline(admin.TabularInline):
    model = RateCardWeight
    extra = 0

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return obj is None

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        # A rate card is never rewritten once stored: bills already computed depend on it.
        return obj is None

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return obj is None


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    list_display = ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
    inlines = [RateCardWeightInline]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        if obj is not None:
            return ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
        return []

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False
