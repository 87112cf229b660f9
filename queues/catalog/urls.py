from django.urls import path

from queues.catalog import views

app_name = "queues"

urlpatterns = [
    path("", views.catalog, name="catalog"),
    path("<slug:name>/", views.queue_detail, name="detail"),
]
