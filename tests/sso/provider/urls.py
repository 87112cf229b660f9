from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.sso.provider import control

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("test/client", control.client),
    path("test/users/<str:username>", control.user),
    path("test/knobs", control.knobs),
]
