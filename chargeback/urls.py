from django.urls import path

from chargeback import views

app_name = "chargeback"
urlpatterns = [
    path("", views.report, name="report"),
    path("close", views.close, name="close"),
    path("reopen", views.reopen, name="reopen"),
    path("teams/<str:name>/", views.team, name="team"),
    path("jobs/<int:job_id>/", views.job, name="job"),
]
