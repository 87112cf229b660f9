"""Django admin for every domain model, usable as is by staff."""

from django.contrib import admin

from queues.models import (
    CapabilityClass,
    ClusterStatus,
    FairShareSettings,
    GpuClass,
    Job,
    JobEvent,
    Lease,
    Node,
    Queue,
    Quota,
    RateCard,
    RateCardWeight,
    Reservation,
    Team,
    UsageInterval,
)


@admin.register(GpuClass)
class GpuClassAdmin(admin.ModelAdmin):
    list_display = ["name", "product", "hbm_gb", "tier", "rdma", "active"]
    list_filter = ["active", "rdma", "tier"]
    search_fields = ["name", "product"]


@admin.register(CapabilityClass)
class CapabilityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "min_hbm_gb", "mig_profile", "rdma", "min_tier", "active"]
    list_filter = ["active", "rdma"]
    search_fields = ["name", "description"]


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "namespace", "cost_center", "fair_share_weight", "active"]
    list_filter = ["active"]
    search_fields = ["name", "namespace", "cost_center"]
    filter_horizontal = ["members"]
    inlines = [QuotaInline]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["team", "gpu_class", "nominal", "borrowing_limit"]
    list_filter = ["gpu_class"]
    list_select_related = ["team", "gpu_class"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "priority",
        "preemption_class",
        "sharing_mode",
        "max_runtime",
        "may_borrow",
        "reservation_only",
        "active",
    ]
    list_filter = ["active", "preemption_class", "sharing_mode"]
    search_fields = ["name", "description"]
    filter_horizontal = ["allowed_gpu_classes", "allowed_capability_classes", "teams"]


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "team",
        "queue",
        "gpu_class",
        "amount",
        "starts_at",
        "ends_at",
        "active",
    ]
    list_filter = ["active", "gpu_class", "team"]
    list_select_related = ["team", "queue", "gpu_class"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_class",
        "gpu_count",
        "rack",
        "healthy",
        "maintenance",
        "gpus_used_outside",
        "last_seen_at",
    ]
    list_filter = ["gpu_class", "healthy", "maintenance", "rack"]
    search_fields = ["name", "product"]
    list_select_related = ["gpu_class"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "kind", "message", "details"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "owner",
        "team",
        "queue",
        "state",
        "pods",
        "gpu_class",
        "submitted_at",
    ]
    list_filter = ["state", "queue", "team"]
    search_fields = ["id", "name", "owner__username", "k8s_job_name"]
    list_select_related = ["owner", "team", "queue", "gpu_class"]
    raw_id_fields = ["owner"]
    inlines = [JobEventInline]
    date_hierarchy = "submitted_at"


@admin.register(FairShareSettings)
class FairShareSettingsAdmin(admin.ModelAdmin):
    list_display = ["usage_half_life"]


@admin.register(UsageInterval)
class UsageIntervalAdmin(admin.ModelAdmin):
    list_display = [
        "pod_name",
        "job",
        "team",
        "gpu_class",
        "devices",
        "started_at",
        "ended_at",
        "end_estimated",
    ]
    list_filter = ["team", "gpu_class", "end_estimated"]
    list_select_related = ["job", "team", "gpu_class"]
    raw_id_fields = ["job"]

    def has_change_permission(self, request, obj=None):
        # What the cluster reported is never edited by hand; corrections are adjustments.
        return False


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ["name", "holder", "expires_at"]


@admin.register(ClusterStatus)
class ClusterStatusAdmin(admin.ModelAdmin):
    list_display = ["reachable", "unreachable_since", "last_success_at", "unknown_jobs"]


class RateCardWeightInline(admin.TabularInline):
    model = RateCardWeight
    extra = 0

    def has_add_permission(self, request, obj=None):
        return obj is None

    def has_change_permission(self, request, obj=None):
        # A rate card is never rewritten once stored: bills already computed depend on it.
        return obj is None

    def has_delete_permission(self, request, obj=None):
        return obj is None


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    list_display = ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
    inlines = [RateCardWeightInline]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
        return []

    def has_delete_permission(self, request, obj=None):
        return False
