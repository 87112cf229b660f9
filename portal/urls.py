from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal import token_views, views
from portal.sso import views as sso_views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("vendor/plotly.min.js", views.plotly_js, name="plotly-js"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("login/sso/", sso_views.sso_login, name="sso-login"),
    path("login/sso/callback", sso_views.sso_callback, name="sso-callback"),
    path("logout/", sso_views.LogoutView.as_view(), name="logout"),
    path("tokens/", token_views.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke", token_views.token_revoke, name="token-revoke"),
    path("settings/notifications/", include("queues.notifications.urls")),
    path("admin/", admin.site.urls),
    path("queues/", include("queues.catalog.urls")),
    path("jobs/", include("queues.jobs.urls")),
    path("manage/team-webhooks/", include("queues.notifications.team_urls")),
    path("manage/", include("queues.operations.urls")),
    path("quota-requests/", include("queues.operations.request_urls")),
    path("chargeback/", include("chargeback.urls")),
    path("ops/", include("chargeback.ops.urls")),
    path("metrics", include("chargeback.ops.metrics_urls")),
    path("usage/", include("chargeback.usage_urls")),
    path("api/chargeback/", include("chargeback.api_urls")),
    path("api/", include("queues.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]

handler400 = "portal.views.bad_request"
handler403 = "portal.views.permission_denied"
handler404 = "portal.views.not_found"
handler500 = "portal.views.error"
