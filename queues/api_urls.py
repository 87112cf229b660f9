"""The queues app's REST API: the catalog (read-only), jobs, and the admin side's quotas."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from queues.catalog import apis as catalog_apis
from queues.jobs import apis as job_apis
from queues.notifications import apis as notification_apis
from queues.operations import apis as operations_apis

router = DefaultRouter()
router.register("queues", catalog_apis.QueueViewSet, basename="queue")
router.register("gpu-classes", catalog_apis.GpuClassViewSet, basename="gpu-class")
router.register(
    "capability-classes", catalog_apis.CapabilityClassViewSet, basename="capability-class"
)
router.register("jobs", job_apis.JobViewSet, basename="job")

urlpatterns = [
    path(
        "jobs/<int:pk>/checkpoint/",
        job_apis.JobCheckpointView.as_view(),
        name="job-checkpoint",
    ),
    path(
        "notifications/",
        notification_apis.NotificationSettingsView.as_view(),
        name="notification-settings",
    ),
    path(
        "teams/<str:team>/webhook/",
        notification_apis.TeamWebhookView.as_view(),
        name="team-webhook",
    ),
    path(
        "teams/<str:team>/webhook/secret/",
        notification_apis.TeamWebhookSecretView.as_view(),
        name="team-webhook-secret",
    ),
    path("quotas/", operations_apis.QuotaListView.as_view(), name="quota-list"),
    path(
        "quotas/<slug:team>/<slug:gpu_class>/",
        operations_apis.QuotaView.as_view(),
        name="quota-detail",
    ),
    *router.urls,
]
