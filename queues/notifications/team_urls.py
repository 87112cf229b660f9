from django.urls import path

from queues.notifications import views

app_name = "team-webhooks"

urlpatterns = [
    path("", views.team_webhooks, name="list"),
    path("<str:team>/", views.team_webhook_edit, name="edit"),
    path("<str:team>/secret", views.team_webhook_secret_new, name="secret"),
]
