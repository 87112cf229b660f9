from django.urls import path

from queues import job_views

app_name = "jobs"

urlpatterns = [
    path("", job_views.job_list, name="list"),
    path("new", job_views.job_new, name="new"),
    path("<int:job_id>/", job_views.job_detail, name="detail"),
    path("<int:job_id>/cancel", job_views.job_cancel_view, name="cancel"),
    path("<int:job_id>/alternatives", job_views.job_alternatives_view, name="alternatives"),
]
