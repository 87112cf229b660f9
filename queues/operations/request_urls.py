from django.urls import path

from queues.operations import views

app_name = "quota_requests"

urlpatterns = [
    path("", views.my_requests, name="list"),
    path("new", views.request_new, name="new"),
    path("<int:request_id>/", views.request_detail, name="detail"),
]
