from django.urls import path

from queues.notifications import views

app_name = "notifications"

urlpatterns = [
    path("", views.notification_settings, name="settings"),
    path("webhook-secret", views.webhook_secret_new, name="webhook-secret"),
]
