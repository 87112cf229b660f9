from django.urls import path

from ops import views

urlpatterns = [
    path("", views.metrics, name="metrics"),
]
