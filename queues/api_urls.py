"""The queues app's REST API: the catalog (read-only) and jobs."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from queues.catalog import apis as catalog_apis
from queues.jobs import apis as job_apis

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
    *router.urls,
]
