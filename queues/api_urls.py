from rest_framework.routers import DefaultRouter

from queues import apis

router = DefaultRouter()
router.register("queues", apis.QueueViewSet, basename="queue")
router.register("gpu-classes", apis.GpuClassViewSet, basename="gpu-class")
router.register("capability-classes", apis.CapabilityClassViewSet, basename="capability-class")

urlpatterns = router.urls
