from django.urls import path

from queues.operations import views

app_name = "operations"

urlpatterns = [
    path("", views.manage_home, name="home"),
    path("quotas/", views.quota_grid_view, name="quotas"),
    path("quotas/<str:team>/<str:gpu_class>/", views.quota_edit, name="quota-edit"),
    path("maintenance/", views.maintenance, name="maintenance"),
    path("maintenance/<str:name>/return", views.node_return_view, name="node-return"),
    path("audit/", views.audit_log, name="audit"),
    path("policy/", views.policy_overview, name="policy"),
    path("policy/export", views.policy_export, name="policy-export"),
    path("policy/roles/", views.policy_roles, name="policy-roles"),
    path("policy/<str:section>/new", views.policy_object, name="policy-new"),
    path("policy/<str:section>/<str:name>/", views.policy_object, name="policy-object"),
    path("reservations/", views.reservation_list, name="reservations"),
    path("reservations/new", views.reservation_edit, name="reservation-new"),
    path("reservations/<str:name>/", views.reservation_edit, name="reservation-edit"),
    path("reservations/<str:name>/end", views.reservation_end_view, name="reservation-end"),
    path("requests/", views.request_list, name="requests"),
    path("requests/<int:request_id>/approve", views.request_approve, name="request-approve"),
    path("requests/<int:request_id>/decline", views.request_decline, name="request-decline"),
]
