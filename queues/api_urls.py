from django.urls import path
from rest_framework.routers import DefaultRouter

from queues import apis, job_apis

router = DefaultRouter()
router.register("queues", apis.QueueViewSet, basename="queue")
router.register("gpu-classes", apis.GpuClassViewSet, basename="gpu-class")
router.register("capability-classes", apis.CapabilityClassViewSet, basename="capability-class")
router.register("jobs", job_apis.JobViewSet, basename="job")

urlpatterns = [
    path(
        "jobs/<int:pk>/checkpoint/",
        job_apis.JobCheckpointView.as_view(),
        name="job-checkpoint",
    ),
    *router.urls,
]
