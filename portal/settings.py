"""GPU Portal settings: every value comes from the environment (12-factor).

Read top to bottom. Defaults are the embedded setup a fresh clone runs (SQLite under ``var/``, the
simulated cluster, a Celery broker that needs no server). Production sets ``DEBUG=false`` and
``SECRET_KEY``, ``DATABASE_URL=postgres://…``, ``CELERY_BROKER_URL=redis://…`` and a real
cluster through ``CLUSTER_MODE``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from portal.logs import LOG_FORMATS, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# --- Where local state lives (SQLite file, broker folders, simulated cluster's kubeconfig) -------
VAR_DIR = Path(env.str("PORTAL_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

# --- Core --------------------------------------------------------------------------------------
DEBUG = env.bool("DEBUG", default=False)
_INSECURE_DEV_KEY = "insecure-dev-key-only-for-debug-and-tests"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off: set the SECRET_KEY environment variable "
            "to a long random string (or DEBUG=true for local development)."
        )
    SECRET_KEY = _INSECURE_DEV_KEY
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "csp",
    "auditlog",
    "portal",
    "queues",
    "chargeback",
    "chargeback.ops",
]

MIDDLEWARE = [
    "portal.request_log.RequestIdMiddleware",
    # /healthz and /metrics: any Host, plain HTTP (the kubelet and Prometheus use the pod's IP).
    "portal.middleware.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.NulCharacterMiddleware",
    "portal.middleware.ApiBodyLimitMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "queues.audit.AuditSourceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.roles.roles_context",
            ],
        },
    },
]

# --- Database ----------------------------------------------------------------------------------
# SQLite by default. WAL lets readers run beside one writer, the busy timeout waits instead of
# failing with "database is locked", and IMMEDIATE transactions take the write lock up front so
# two writers never deadlock upgrading a read lock (web, worker and beat share the file).
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # A file (not memory) so that test threads (live server, workers) share it; one per process
    # so that test runs side by side never write the same file.
    _test_db = VAR_DIR / f"test-{os.getpid()}.sqlite3"
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(_test_db)
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache -------------------------------------------------------------------------------------
# Login lock-outs and API throttles count here, so every web worker must see the same cache:
# Redis when CACHE_URL (or, without it, a redis:// CELERY_BROKER_URL) says so, else a table in
# the database (created by the migration portal 0002, like any other table).
_cache_url = env.str("CACHE_URL", default="") or (
    env.str("CELERY_BROKER_URL", default="")
    if env.str("CELERY_BROKER_URL", default="").startswith(("redis://", "rediss://"))
    else ""
)
if _cache_url.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {
            "BACKEND": "portal.cache.TolerantRedisCache",
            "LOCATION": _cache_url,
            "KEY_PREFIX": "gpuportal",
            # A Redis that is down answers fast (limits then go uncounted, requests go on).
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
elif _cache_url == "locmem://":
    # One process's memory: limits do not hold across workers. For tests and one-process runs.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
elif _cache_url:
    raise ImproperlyConfigured(
        f"CACHE_URL={_cache_url!r}: expected redis://…, rediss://… or locmem://"
    )
else:
    CACHES = {
        "default": {
            "BACKEND": "portal.cache.AtomicDatabaseCache",
            "LOCATION": "portal_cache",
        }
    }

# --- Authentication ----------------------------------------------------------------------------
# Local passwords (portal.login_throttle), then a person an identity provider vouched for
# (portal.sso.oidc), then LDAP when configured (below).
AUTHENTICATION_BACKENDS = [
    "portal.login_throttle.LoginThrottleBackend",
    "portal.sso.oidc.OidcBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "queues:catalog"  # admins land on /manage/ (portal.views.LoginView)
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Login throttling (portal.login_throttle): this many failed logins for one username within the
# lock-out time lock that username for the lock-out time, right password or not.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_LOCKOUT_SECONDS = env.int("LOGIN_LOCKOUT_SECONDS", default=900)
# Who may log in with a password kept by the portal (LDAP passwords are the directory's):
# "all" (the demo, and a portal without single sign-on), "superusers" (only the break-glass
# administrators; everyone else through single sign-on or LDAP), "off" (nobody).
PASSWORD_LOGIN = env.str("PASSWORD_LOGIN", default="all")
if PASSWORD_LOGIN not in ("all", "superusers", "off"):
    raise ImproperlyConfigured(
        f"PASSWORD_LOGIN={PASSWORD_LOGIN!r}: expected one of all, superusers, off"
    )

# --- Single sign-on: OpenID Connect (docs/operations.md#single-sign-on) -------------------------
# Off unless OIDC_ISSUER is set. The portal reads the provider's discovery document
# (<issuer>/.well-known/openid-configuration) and logs people in with the authorization-code
# flow (PKCE, state and nonce); the redirect URI to register is <portal>/login/sso/callback.
# The ID token must be signed with a key from the provider's JWKS, issued by OIDC_ISSUER for
# OIDC_CLIENT_ID, unexpired, and carry the nonce, the username claim and the groups claim.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_SCOPES = env.str("OIDC_SCOPES", default="openid email profile groups")
# The claim naming the portal user (taken at the first login; later changes rename nobody).
OIDC_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="preferred_username")
# The claim listing the person's groups, which the policy maps to teams and roles. A token
# without it is refused (never read as "in no group"); empty: groups are not read at all.
OIDC_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
# Connect and read timeout of each call to the provider (discovery, keys, token).
OIDC_TIMEOUT_SECONDS = env.float("OIDC_TIMEOUT_SECONDS", default=5.0)
# Logging out of the portal also ends the session at the provider (RP-initiated logout), when
# the provider offers an end_session_endpoint; register <portal>/login/ as a post-logout URI.
OIDC_PROVIDER_LOGOUT = env.bool("OIDC_PROVIDER_LOGOUT", default=False)
OIDC_LOGIN_LABEL = env.str("OIDC_LOGIN_LABEL", default="Log in with single sign-on")
if OIDC_ISSUER:
    _missing = [
        name for name in ("OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET") if not env.str(name, default="")
    ]
    if _missing:
        raise ImproperlyConfigured(f"OIDC_ISSUER is set: set {' and '.join(_missing)} too")
    # ID tokens and the client secret travel to and from the provider: never in the clear,
    # except to a provider on this very machine (development, tests).
    _issuer = urlsplit(OIDC_ISSUER)
    if _issuer.scheme != "https" and not (
        _issuer.scheme == "http" and _issuer.hostname in ("127.0.0.1", "::1", "localhost")
    ):
        raise ImproperlyConfigured(
            f"OIDC_ISSUER={OIDC_ISSUER!r}: expected an https:// URL (http:// only for a "
            "provider on this machine)"
        )
    if "openid" not in OIDC_SCOPES.split():
        raise ImproperlyConfigured(f"OIDC_SCOPES={OIDC_SCOPES!r} must include openid")

# --- LDAP login (docs/operations.md#ldap) --------------------------------------------------------
# Off unless LDAP_SERVER_URI is set (it needs the ldap extra: pip install '.[ldap]'). The login
# form's username and password are checked against the directory: the person's entry is found
# under LDAP_USER_SEARCH_BASE with LDAP_USER_FILTER, and their groups (whose names the policy
# maps like OpenID Connect's) under LDAP_GROUP_SEARCH_BASE.
LDAP_SERVER_URI = env.str("LDAP_SERVER_URI", default="")
if LDAP_SERVER_URI:
    try:
        from portal.sso.ldap_config import ldap_auth_settings
    except ImportError as _exc:
        raise ImproperlyConfigured(
            f"LDAP_SERVER_URI is set but LDAP support is not installed ({_exc}): "
            "pip install '.[ldap]' (python-ldap needs libldap2-dev and libsasl2-dev to build)"
        ) from _exc
    AUTHENTICATION_BACKENDS.append("portal.sso.ldap.PortalLDAPBackend")
    try:
        # AUTH_LDAP_SERVER_URI, AUTH_LDAP_USER_SEARCH, AUTH_LDAP_GROUP_SEARCH… (django-auth-ldap)
        globals().update(
            ldap_auth_settings(
                server_uri=LDAP_SERVER_URI,
                start_tls=env.bool("LDAP_START_TLS", default=False),
                # A service account to search with (empty: search anonymously).
                bind_dn=env.str("LDAP_BIND_DN", default=""),
                bind_password=env.str("LDAP_BIND_PASSWORD", default=""),
                user_search_base=env.str("LDAP_USER_SEARCH_BASE"),
                user_filter=env.str("LDAP_USER_FILTER", default="(uid=%(user)s)"),
                group_search_base=env.str("LDAP_GROUP_SEARCH_BASE", default=""),
                group_type=env.str("LDAP_GROUP_TYPE", default="groupOfNames"),
                timeout_seconds=env.float("LDAP_TIMEOUT_SECONDS", default=5.0),
            )
        )
    except ValueError as _exc:
        raise ImproperlyConfigured(str(_exc)) from _exc

# --- HTTPS and headers -------------------------------------------------------------------------
# Behind a TLS-terminating proxy, the proxy's header says the request came over HTTPS; set
# SECURE_PROXY_SSL_HEADER=X-Forwarded-Proto only when the proxy always sets (or strips) it.
_proxy_header = env.str("SECURE_PROXY_SSL_HEADER", default="")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
# /healthz and /metrics are answered before the redirect (portal.middleware.ProbeMiddleware):
# probes and scrapes come over plain HTTP from inside the cluster.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
# The "preload" token only allows submitting the domain to browsers' preload list; it enrols
# nothing by itself.
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): only the portal's own scripts, styles and images; no
# inline script and no eval. plotly and htmx add inline styles (style-src 'unsafe-inline').
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# --- Time, language, static files --------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Hashed, compressed file names need `collectstatic` first (the Docker image runs it); local runs
# and tests serve the files as they are.
STATICFILES_MANIFEST = env.bool("STATICFILES_MANIFEST", default=not DEBUG)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATICFILES_MANIFEST
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_MANIFEST_STRICT = False

# --- REST API ----------------------------------------------------------------------------------
# Token authentication comes first so that an anonymous request is answered 401 with a
# WWW-Authenticate header (DRF takes the header from the first authentication class).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "portal.schema.PortalAutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["portal.filters.StrictFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.PortalPagination",
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.PortalJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # Per user, counted in the shared cache; over the rate: 429 with Retry-After. (Every API
    # endpoint needs credentials, and DRF checks them before rates: a caller without is 401.)
    # Previews each simulate the whole cluster: their own, lower rate
    # (portal.throttling.PreviewRateThrottle).
    "DEFAULT_THROTTLE_CLASSES": [
        "portal.throttling.PortalUserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env.str("API_THROTTLE_USER", default="600/min"),
        "preview": env.str("API_THROTTLE_PREVIEW", default="30/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Queues, capability classes, jobs and chargeback of a shared GPU cluster.",
    "VERSION": "0.1.0",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs page are for signed-in callers (a session or a token), like every
    # other /api/ endpoint: anonymous is 401.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the installed sidecar package: the docs page needs no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ------------------------------------------------------------------------------------
# Without CELERY_BROKER_URL the broker is kombu's filesystem transport under var/: no server to
# run. Production sets redis://…. The database stays the source of truth; messages only nudge.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "celery" / "broker"
    _broker_dir.mkdir(parents=True, exist_ok=True)
    for _folder in ("processed", "control"):
        (VAR_DIR / "celery" / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(VAR_DIR / "celery" / "processed"),
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
    }
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TIMEZONE = "UTC"
# The worker logs through LOGGING below (JSON lines with the task's id), not Celery's own format.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
RECONCILE_INTERVAL_SECONDS = env.float("RECONCILE_INTERVAL_SECONDS", default=5.0)
# Submitting or cancelling asks for a reconcile right after the commit (requests coalesce).
RECONCILE_ON_COMMIT = env.bool("RECONCILE_ON_COMMIT", default=True)
# How long a reconcile's lease lasts: a worker killed mid-cycle holds it this long at most.
RECONCILE_LEASE_SECONDS = env.float("RECONCILE_LEASE_SECONDS", default=120.0)
# Chargeback closes last month once this many hours of the new month have passed (late usage
# still lands in it until then; after, it becomes an adjustment of the next month).
CHARGEBACK_CLOSE_GRACE_HOURS = env.int("CHARGEBACK_CLOSE_GRACE_HOURS", default=72)
CELERY_BEAT_SCHEDULE = {
    "reconcile": {"task": "queues.reconcile", "schedule": RECONCILE_INTERVAL_SECONDS},
    "close-previous-period": {"task": "chargeback.close_previous_period", "schedule": 3600.0},
    # a budget whose month's spend reached it is noted once; admins and finance are told
    "budget-overruns": {
        "task": "chargeback.budget_overruns",
        "schedule": env.float("BUDGET_CHECK_SECONDS", default=600.0),
    },
    # the duty-cycle counters of /metrics (does nothing without PROMETHEUS_URL)
    "duty-count": {"task": "queues.duty_count", "schedule": 300.0},
    "notifications": {
        "task": "queues.notifications.collect",
        "schedule": env.float("NOTIFICATION_INTERVAL_SECONDS", default=15.0),
    },
}

# --- Notifications (docs/operations.md#notifications) -------------------------------------------
# E-mail goes through Django's SMTP backend when EMAIL_HOST is set; without it, to the worker's
# log (the console backend), so that a demo sends nothing anywhere.
EMAIL_HOST = env.str("EMAIL_HOST", default="")
EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND",
    default="django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_PORT = env.int("EMAIL_PORT", default=587)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=30)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="GPU Portal <gpuportal@localhost>")
# The domain of notifications' Message-IDs (a repeated one is recognizable by it).
NOTIFICATION_MESSAGE_DOMAIN = env.str("NOTIFICATION_MESSAGE_DOMAIN", default="gpuportal.invalid")
# A send waits this long after it is asked for, so that a burst becomes one message.
NOTIFICATION_BATCH_SECONDS = env.float("NOTIFICATION_BATCH_SECONDS", default=30.0)
# A sender that claimed deliveries and died: after this long another may send them.
NOTIFICATION_CLAIM_SECONDS = env.int("NOTIFICATION_CLAIM_SECONDS", default=300)
# A reconcile that changed something asks for a collection when it ends (tests: off).
NOTIFY_ON_COMMIT = env.bool("NOTIFY_ON_COMMIT", default=True)
# A waiting job's "at the latest" that moves later by more than this is news to its owner.
NOTIFICATION_START_LATER_MINUTES = env.int("NOTIFICATION_START_LATER_MINUTES", default=60)

# --- The cluster -------------------------------------------------------------------------------
# "sim": the simulated cluster (its server writes a kubeconfig under var/sim/); "kubeconfig": a
# real cluster through KUBECONFIG; "in-cluster": the service account the portal runs as.
CLUSTER_MODE = env.str("CLUSTER_MODE", default="sim")
if CLUSTER_MODE not in {"sim", "kubeconfig", "in-cluster"}:
    raise ImproperlyConfigured(
        f"CLUSTER_MODE={CLUSTER_MODE!r}: expected one of sim, kubeconfig, in-cluster"
    )
CLUSTER_KUBECONFIG = env.str("KUBECONFIG", default=str(VAR_DIR / "sim" / "kubeconfig"))
CLUSTER_CONTEXT = env.str("KUBE_CONTEXT", default="") or None
# In-cluster: the projected service-account token and the cluster's CA, as the kubelet mounts them.
# The token rotates; the adapter reads it again when the file changes or the API answers 401.
CLUSTER_TOKEN_FILE = env.str(
    "CLUSTER_TOKEN_FILE", default="/var/run/secrets/kubernetes.io/serviceaccount/token"
)
CLUSTER_CA_FILE = env.str(
    "CLUSTER_CA_FILE", default="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)
# Node label keys that carry topology (they differ between clusters).
# The portal's address as a job's pods reach it: given to them as GPUPORTAL_API_URL, with a token
# scoped to the job, so that they can report checkpoints. Empty: pods are not told.
PORTAL_URL = env.str("PORTAL_URL", default="").rstrip("/")
# An admitted job whose pods cannot start because a Secret (or a key of one) they reference is
# missing holds its GPUs while it waits for someone to create it: after this long from its
# admission it fails and gives them back (queues.reconcile.jobs).
MISSING_SECRET_GRACE_SECONDS = env.int("MISSING_SECRET_GRACE_SECONDS", default=300)
# Where the portal creates the ProvisioningRequests that ask node pools for nodes.
CLUSTER_PROVISIONING_NAMESPACE = env.str(
    "CLUSTER_PROVISIONING_NAMESPACE", default="gpuportal-system"
)
CLUSTER_RACK_LABEL = env.str("CLUSTER_RACK_LABEL", default="topology.kubernetes.io/rack")
CLUSTER_NETWORK_DOMAIN_LABEL = env.str(
    "CLUSTER_NETWORK_DOMAIN_LABEL", default="network.gpuportal.io/domain"
)

# --- Submissions ------------------------------------------------------------------------------
# Registries jobs may pull images from (host names, comma-separated); empty: any registry.
ALLOWED_IMAGE_REGISTRIES = env.list("ALLOWED_IMAGE_REGISTRIES", default=[])
# Pending jobs one user may have waiting (all queues), and one queue may hold (all users): a
# submission past either is refused naming the limit (queues.jobs.requests.pending_cap_errors).
# They also bound what a preview simulates.
MAX_PENDING_JOBS_PER_USER = env.int("MAX_PENDING_JOBS_PER_USER", default=200)
MAX_PENDING_JOBS_PER_QUEUE = env.int("MAX_PENDING_JOBS_PER_QUEUE", default=2000)
# What-ifs (another queue or capability class) a preview or a job's alternatives try at most:
# each is a full plan of the cluster.
MAX_ALTERNATIVES_TRIED = env.int("MAX_ALTERNATIVES_TRIED", default=12)

# --- Logging -----------------------------------------------------------------------------------
# One JSON object per line to standard error (LOG_FORMAT=json, the default unless DEBUG), or
# text; every line carries the request's (or task's) id. See portal/logs.py.
LOG_FORMAT = env.str("LOG_FORMAT", default="text" if DEBUG else "json")
if LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: expected one of json, text")
LOGGING = logging_config(log_format=LOG_FORMAT, level=env.str("LOG_LEVEL", default="INFO"))

# The operations dashboard and /metrics (docs/operations-dashboard.md). /metrics answers only a
# caller that sends ``Authorization: Bearer <METRICS_TOKEN>``; unset, it answers nobody.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# A Prometheus-compatible HTTP API carrying DCGM's DCGM_FI_DEV_GPU_UTIL per pod (e.g.
# http://prometheus:9090); unset, the duty-cycle panel says it is not configured.
PROMETHEUS_URL = env.str("PROMETHEUS_URL", default="")
PROMETHEUS_TIMEOUT_SECONDS = env.float("PROMETHEUS_TIMEOUT_SECONDS", default=5.0)
