from django.urls import path

from chargeback.ops import views

urlpatterns = [
    path("", views.metrics, name="metrics"),
]
