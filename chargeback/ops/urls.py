from django.urls import path

from chargeback.ops import views

app_name = "ops"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("last-day", views.last_day, name="last-day"),
]
