"""The test provider's settings: everything from IDP_* variables the fixture sets; nothing of
the portal's."""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR = Path(os.environ["IDP_STATE_DIR"])
ISSUER = os.environ["IDP_ISSUER"]  # http://127.0.0.1:<port>/o
CONTROL_TOKEN = os.environ["IDP_CONTROL_TOKEN"]

SECRET_KEY = os.environ["IDP_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.sso.provider.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(STATE_DIR / "idp.sqlite3")}
}
# The portal runs on another port of the same machine: cookies do not tell ports apart.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; throwaway users

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": os.environ["IDP_RSA_PRIVATE_KEY"],
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.provider.validator.KnobValidator",
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "profile",
        "email": "e-mail address",
        "groups": "groups",
    },
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
}
