"""Django admin for raw inspection by staff.

Mirror and ledger rows (what the reconcile writes from the cluster: jobs and their events, usage
intervals, nodes, leases, the cluster's status, queue estimates and stats) are read-only here: no
add, no edit, no delete. Policy objects may be edited, but a save that leaves the policy invalid
or over-committed (the checks of ``apply_policy``) is rolled back with the problems shown, and
every change lands in the audit log (source ``admin``). The audit log itself is read-only.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html_join

from portal.masking import shown_env
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
    QueueEstimate,
    QueueStats,
    Quota,
    QuotaRequest,
    RateCard,
    RateCardWeight,
    Reservation,
    SubmissionSettings,
    Team,
    UsageInterval,
)
from queues.policy.apply import policy_problems, team_listed_members_set


class _PolicyRefused(Exception):
    pass


class PolicyAdmin(admin.ModelAdmin):
    """A policy object's admin: the save (with its inlines and many-to-many) is rolled back
    when it brings a problem ``apply_policy`` would refuse (over-committed capacity, an
    invalid object), and the problems are shown with their numbers."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        before = {str(p) for p in policy_problems()}
        try:
            with transaction.atomic():
                response = super().changeform_view(request, object_id, form_url, extra_context)
                new = [str(p) for p in policy_problems() if str(p) not in before]
                if new:
                    raise _PolicyRefused("; ".join(new))
        except _PolicyRefused as exc:
            list(messages.get_messages(request))  # drop the "changed successfully" message
            messages.error(request, f"Not saved, the policy would be refused: {exc}")
            return HttpResponseRedirect(request.get_full_path())
        return response


class ReadOnlyAdmin(admin.ModelAdmin):
    """What the reconcile mirrors from the cluster or records as it happens: look, never touch."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(GpuClass)
class GpuClassAdmin(PolicyAdmin):
    list_display = ["name", "product", "hbm_gb", "tier", "rdma", "active"]
    list_filter = ["active", "rdma", "tier"]
    search_fields = ["name", "product"]


@admin.register(CapabilityClass)
class CapabilityClassAdmin(PolicyAdmin):
    list_display = ["name", "min_hbm_gb", "mig_profile", "rdma", "min_tier", "active"]
    list_filter = ["active", "rdma"]
    search_fields = ["name", "description"]


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


class TeamAdminForm(forms.ModelForm):
    """A team with the members the policy lists (as the policy file's ``members``); members an
    identity-provider group gives the team are shown beside it and kept."""

    listed_members = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.order_by("username"),
        required=False,
        widget=FilteredSelectMultiple("members", is_stacked=False),
        help_text="The members the policy lists. Members an identity-provider group gives the "
        "team (below) stay whatever this list says.",
    )

    class Meta:
        model = Team
        fields = ["name", "description", "namespace", "cost_center", "fair_share_weight", "groups"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["listed_members"].initial = list(
                get_user_model().objects.filter(
                    team_memberships__team=self.instance, team_memberships__listed=True
                )
            )


@admin.register(Team)
class TeamAdmin(PolicyAdmin):
    form = TeamAdminForm
    list_display = ["name", "namespace", "cost_center", "fair_share_weight", "active"]
    list_filter = ["active"]
    search_fields = ["name", "namespace", "cost_center"]
    readonly_fields = ["members_via_groups"]
    inlines = [QuotaInline]

    @admin.display(description="members via identity-provider groups")
    def members_via_groups(self, obj: Team) -> str:
        names = obj.memberships.filter(via_groups=True).values_list("user__username", flat=True)
        return ", ".join(sorted(names)) or "—"

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        team_listed_members_set(team=form.instance, users=list(form.cleaned_data["listed_members"]))


@admin.register(Quota)
class QuotaAdmin(PolicyAdmin):
    list_display = ["team", "gpu_class", "nominal", "borrowing_limit"]
    list_filter = ["gpu_class"]
    list_select_related = ["team", "gpu_class"]


@admin.register(Queue)
class QueueAdmin(PolicyAdmin):
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
class ReservationAdmin(PolicyAdmin):
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
class NodeAdmin(ReadOnlyAdmin):
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


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    readonly_fields = ["at", "kind", "message", "details"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
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
    inlines = [JobEventInline]
    date_hierarchy = "submitted_at"
    # The stored environment is never shown as it is: the page shows what the job page and the
    # API show (portal.masking), so that no page reveals a secret-looking value.
    exclude = ["env"]
    readonly_fields = ["environment"]

    @admin.display(description="environment")
    def environment(self, job: Job) -> str:
        return format_html_join(
            "\n",
            "<div><code>{}={}</code></div>",
            (
                (name, f"secret:{v['secret']}/{v['key']}" if isinstance(v, dict) else v)
                for name, v in shown_env(job.env).items()
            ),
        )


@admin.register(FairShareSettings)
class FairShareSettingsAdmin(PolicyAdmin):
    list_display = ["usage_half_life"]


@admin.register(SubmissionSettings)
class SubmissionSettingsAdmin(PolicyAdmin):
    list_display = ["plain_env_names_allowed"]


@admin.register(UsageInterval)
class UsageIntervalAdmin(ReadOnlyAdmin):
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


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ["name", "holder", "expires_at"]


@admin.register(ClusterStatus)
class ClusterStatusAdmin(ReadOnlyAdmin):
    list_display = ["reachable", "unreachable_since", "last_success_at", "unknown_jobs"]


class RateCardWeightInline(admin.TabularInline):
    model = RateCardWeight
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A rate card is never rewritten once stored: bills already computed depend on it.
        return obj is None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None


@admin.register(RateCard)
class RateCardAdmin(PolicyAdmin):
    list_display = ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
    inlines = [RateCardWeightInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is not None:
            return ["effective_from", "currency", "price_per_normalized_gpu_hour", "note"]
        return []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["job", "at", "kind", "message"]
    list_filter = ["kind"]
    list_select_related = ["job"]


@admin.register(QueueEstimate)
class QueueEstimateAdmin(ReadOnlyAdmin):
    list_display = ["queue", "team", "estimated_start", "computed_at"]
    list_select_related = ["queue", "team"]


@admin.register(QueueStats)
class QueueStatsAdmin(ReadOnlyAdmin):
    list_display = ["queue", "pending", "running", "computed_at"]
    list_select_related = ["queue"]


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    """Filed and decided on the portal's pages (the decision changes the quota through the
    policy service); here only to look at."""

    list_display = ["id", "team", "gpu_class", "nominal", "borrowing_limit", "status", "created_at"]
    list_filter = ["status", "gpu_class"]
    list_select_related = ["team", "gpu_class"]


# The audit log is read-only everywhere: auditlog's own admin allows deletes through cascades;
# here nobody adds, edits or deletes an entry.
from auditlog.admin import LogEntryAdmin  # noqa: E402
from auditlog.models import LogEntry  # noqa: E402


class AuditLogEntryAdmin(LogEntryAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


if admin.site.is_registered(LogEntry):
    admin.site.unregister(LogEntry)
admin.site.register(LogEntry, AuditLogEntryAdmin)
