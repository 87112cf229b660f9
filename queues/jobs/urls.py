from django.urls import path

from queues.jobs import views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("new", views.job_new, name="new"),
    path("<int:job_id>/", views.job_detail, name="detail"),
    path("<int:job_id>/cancel", views.job_cancel_view, name="cancel"),
    path("<int:job_id>/logs", views.job_logs_view, name="logs"),
    path("<int:job_id>/alternatives", views.job_alternatives_view, name="alternatives"),
]
