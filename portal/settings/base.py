"""Django and its libraries: apps, middleware, database, sign-in, security headers, static
files, the REST API and its schema, the shared cache, Celery and beat."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF

from portal.lib.env import env_bool, env_int, env_list, env_required, env_str

BASE_DIR = Path(__file__).resolve().parents[2]  # portal/settings/base.py -> the checkout
VAR_DIR = Path(
    env_str(
        "PORTAL_VAR_DIR",
        str(BASE_DIR / "var"),
        help="Folder for local state: the SQLite file, the filesystem broker, beat's heartbeat "
        "files, the audit witness and the simulated cloud's checkpoints (the defaults shown as "
        "var/... move with it).",
    )
)

# Off unless asked for: a forgotten variable must never serve tracebacks to the internet.
DEBUG = env_bool(
    "DJANGO_DEBUG",
    False,
    help="0 (the default) is a production server: secure cookies, HSTS, SSL redirect, hashed "
    "static files, no tracebacks, and DJANGO_SECRET_KEY and PORTAL_AUDIT_SIGNING_KEY required. "
    "1 is development: make run, make lint and make bench set it; export it yourself for "
    "manage.py in a checkout.",
)
PRODUCTION_NEEDS = "when DJANGO_DEBUG=0 (the default; DJANGO_DEBUG=1 for development)"
SECRET_KEY = env_required(
    "DJANGO_SECRET_KEY",
    when=PRODUCTION_NEEDS,
    help="Django's secret key (sessions, CSRF, signed values). Unset in production, the "
    "portal refuses to start and names it; in development a fixed, insecure key stands in.",
    fallback="dev-only-insecure-key-never-use-in-production" if DEBUG else None,
)

ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS",
    "localhost,127.0.0.1,[::1]",
    help="Host names the portal answers to.",
)
CSRF_TRUSTED_ORIGINS = env_list(
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    help="Origins allowed to post forms, e.g. https://gpu.example.org.",
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "portal.apps.SignInAttemptsConfig",  # django-axes, named for the admin
    "csp",
    "audit",
    "portal",
    "instances",
    "billing",
    # Last: the demo seeding may import every app above, and none imports it.
    "demo",
]

MIDDLEWARE = [
    # Outermost after audit, so every answer of the middleware below carries both headers.
    "portal.middleware.CSPMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
    # The API's version on every /api/ answer, 401s and 404s included (clients warn on it).
    "portal.middleware.ApiVersionMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # A NUL in a URL part, query or form field answers 400 before any lookup sees it.
    "portal.middleware.RejectNulMiddleware",
    # Last: it turns a locked-out sign-in into the lockout answer (429).
    "axes.middleware.AxesMiddleware",
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
                "portal.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str(
            "DATABASE_URL",
            f"sqlite:///{VAR_DIR / 'portal.sqlite3'}",
            help="The database, e.g. postgres://user:password@host:5432/portal (production, "
            "CI). The default is SQLite under PORTAL_VAR_DIR, for make run.",
        ),
        conn_max_age=env_int(
            "DATABASE_CONN_MAX_AGE",
            60,
            help="Seconds a database connection is kept open between requests (SQLite: always 0).",
        ),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share one SQLite file in the embedded default: wait for the write
    # lock instead of failing at once, and take it at BEGIN so readers never upgrade mid-way.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file, not memory, so that tests can run a real worker process against it; one per
    # test run, so that two runs in one checkout never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "portal.User"
AUTHENTICATION_BACKENDS = [
    # First, so that a locked-out username and address never reach the password check.
    "axes.backends.AxesStandaloneBackend",
    # The permissions a role gives (portal/permissions.py), before the per-user grants.
    "portal.lib.backends.RoleBackend",
    # Single sign-on's callback (idle unless PORTAL_OIDC_ISSUER is set), then passwords
    # (Django's ModelBackend, refusing all but the break-glass accounts under PORTAL_OIDC_ONLY).
    "portal.lib.sso.ProviderBackend",
    "portal.lib.sso.PasswordBackend",
]
# Failed sign-ins (pages, admin and the token endpoint) are counted per username and address;
# the sixth within the cool-off answers 429 with Retry-After, and the lock lifts by itself.
# axes answers the failure that reaches the limit with the lockout: five failures pass, the
# sixth is refused.
AXES_FAILURE_LIMIT = 6
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.views.account.lockout"
AXES_USERNAME_CALLABLE = "portal.views.account.sign_in_username"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
# The same address the audit log records: X-Forwarded-For believed only as far as our proxies.
AXES_CLIENT_IP_CALLABLE = "audit.lib.scope.source_address"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
EMAIL_BACKEND = env_str(
    "DJANGO_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend",
    help="How notices are emailed (approvals, lease and idle warnings, budget alerts): the "
    "console in development; e.g. django.core.mail.backends.smtp.EmailBackend in production.",
)
DEFAULT_FROM_EMAIL = env_str(
    "DJANGO_DEFAULT_FROM_EMAIL",
    "GPU Portal <portal@localhost>",
    help="The sender of the portal's email.",
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(
    env_str(
        "DJANGO_STATIC_ROOT",
        str(BASE_DIR / "staticfiles"),
        help="Where collectstatic writes the static files whitenoise serves.",
    )
)
NODE_MODULES = BASE_DIR / "node_modules"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # Front-end libraries come from the npm registry through package-lock.json (`npm ci`);
    # only their dist folders are collected.
    ("vendor/htmx", NODE_MODULES / "htmx.org" / "dist"),
    ("vendor/chartjs", NODE_MODULES / "chart.js" / "dist"),
]
# Development serves static files straight from the finders (node_modules included).
WHITENOISE_USE_FINDERS = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Production hardening: every `check --deploy` warning is cleared when DJANGO_DEBUG=0.
# DJANGO_SECURE_SSL_REDIRECT=0 is for a deployment whose TLS proxy already redirects.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool(
    "DJANGO_SECURE_SSL_REDIRECT",
    not DEBUG,
    help="Redirect http to https. Set 0 only when a TLS proxy in front already redirects, or "
    "for a local trial over http (docker compose sets 0).",
    doc_default="1 (0 when DJANGO_DEBUG=1)",
)
SECURE_REDIRECT_EXEMPT = [r"^health/$"]
SESSION_COOKIE_SECURE = env_bool(
    "DJANGO_SECURE_COOKIES",
    not DEBUG,
    help="Send the session and CSRF cookies over https only. Set 0 only for a local trial over "
    "http (docker compose sets 0).",
    doc_default="1 (0 when DJANGO_DEBUG=1)",
)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int(
    "DJANGO_HSTS_SECONDS",
    0 if DEBUG else 31_536_000,
    help="Strict-Transport-Security max-age in seconds (with subdomains and preload).",
    doc_default="31536000 (0 when DJANGO_DEBUG=1)",
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp) on every answer: scripts, styles, images, fetches, forms
# and the base URL come from this origin only; no inline script, inline <style> or style=""
# attribute runs, nothing evals a string, no page can be framed. Pages keep their behaviour in
# static/js and their looks in static/css; htmx and Chart.js are served from static files.
# Scoped exceptions (the API's browsable pages) are in portal/middleware.py; in DEBUG, django-csp
# leaves Django's own 404 and 500 debug pages alone (they are inline HTML).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "frame-ancestors": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "object-src": [NONE],
    }
}
# Permissions-Policy (django-permissions-policy): no page or frame may ask for a device or a
# sensor, of those Chromium knows (it warns of any other on every page). SSH copy: clipboard-write.
PERMISSIONS_POLICY: dict[str, list[str]] = {
    feature: []
    for feature in (
        "accelerometer",
        "autoplay",
        "browsing-topics",
        "camera",
        "display-capture",
        "encrypted-media",
        "fullscreen",
        "geolocation",
        "gyroscope",
        "hid",
        "idle-detection",
        "local-fonts",
        "magnetometer",
        "microphone",
        "midi",
        "otp-credentials",
        "payment",
        "picture-in-picture",
        "publickey-credentials-get",
        "screen-wake-lock",
        "serial",
        "usb",
        "window-management",
        "xr-spatial-tracking",
    )
}
PERMISSIONS_POLICY["clipboard-write"] = ["self"]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = 12 * 3600

# How many reverse proxies of ours stand in front of the portal; X-Forwarded-For is believed
# only that far, so a client cannot choose the source address recorded for it (the audit log,
# the sign-in lockout and DRF's throttles all use the same address).
PORTAL_TRUSTED_PROXIES = env_int(
    "PORTAL_TRUSTED_PROXIES",
    0,
    help="Reverse proxies of yours in front of the portal: X-Forwarded-For is believed only "
    "that far (0 ignores it), for the audit log's source address, the sign-in lockout and "
    "the API's rate limits.",
)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.lib.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.lib.rest.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "portal.lib.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.lib.rest.exception_handler",
    # DRF's own parsers, answering 400 (not 500) for what they let through: JSON nested too
    # deeply, a form with too many fields.
    "DEFAULT_PARSER_CLASSES": [
        "portal.lib.parsers.JSONParser",
        "portal.lib.parsers.FormParser",
        "portal.lib.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "COERCE_DECIMAL_TO_STRING": True,
    # The token endpoint has its own limit, besides the per-account lockout.
    # The public schema costs seconds to generate: callers not signed in get it at this rate.
    "DEFAULT_THROTTLE_RATES": {
        "auth-token": env_str(
            "PORTAL_TOKEN_RATE",
            "10/minute",
            help="How often one address may ask POST /api/v1/auth/tokens/ for a token (a DRF "
            "rate), besides the per-account sign-in lockout.",
        ),
        "anon-schema": env_str(
            "PORTAL_SCHEMA_ANON_RATE",
            "30/minute",
            help="How often one address not signed in may fetch /api/v1/schema/, which is "
            "generated on each request (429 beyond it; signed-in callers are not limited).",
        ),
    },
    # Throttles key on the address the audit log records, never on a client's X-Forwarded-For.
    "NUM_PROXIES": PORTAL_TRUSTED_PROXIES,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU host portal API",
    "DESCRIPTION": "Order TensorFlow-ready GPU hosts, watch them run, see what they cost.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema of a public API is public: it says what the API takes and answers, not what
    # is in it (no catalog names, no users, no projects), and a client generator or a person
    # deciding whether to ask for an account may read it without one. Every operation in it
    # still needs a session or a token.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Request bodies are documented as JSON, the one form every endpoint's fields fit (lists,
    # objects, null); form posts still work for the browsable API.
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    # Swagger UI from the installed sidecar package, never from a CDN at run time.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI would fetch a validator badge from another origin (refused by the CSP).
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "ENUM_NAME_OVERRIDES": {
        "InstanceStatusEnum": "instances.models.Instance.Status",
        "MarketEnum": "instances.models.Market",
        "JobMarketEnum": "instances.models.JobMarket",
        "JobStatusEnum": "instances.models.Job.Status",
        "JobRunOutcomeEnum": "instances.models.JobRun.Outcome",
        "OrderStatusEnum": "instances.models.Order.Status",
        "PoolStatusEnum": "instances.models.Pool.Status",
        "WebhookEventEnum": "portal.models.WebhookEvent",
        "WebhookDeliveryStatusEnum": "portal.models.WebhookDelivery.Status",
    },
}

# A cache every process shares (Redis, e.g. redis://127.0.0.1:6379/1): DRF's throttles (the
# token endpoint's rate) then count across all gunicorn workers, and sessions are read from it
# before the database (cached_db: a sign-out still ends the session everywhere at once). Without
# one each process caches for itself, which suits the embedded default, and sessions stay in the
# database alone.
PORTAL_CACHE_URL = env_str(
    "PORTAL_CACHE_URL",
    help="A cache every process shares, e.g. redis://host:6379/1: the token endpoint's rate "
    "then counts across all web workers, and sessions are read from it before the database. "
    "Empty: each process caches for itself (docker compose sets one).",
)
if PORTAL_CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": PORTAL_CACHE_URL,
            "KEY_PREFIX": "portal",
        }
    }
    SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

# Celery. The embedded default is kombu's filesystem transport under var/ (no services needed);
# compose and CI point CELERY_BROKER_URL at Redis.
CELERY_BROKER_URL = env_str(
    "CELERY_BROKER_URL",
    "filesystem://",
    help="Celery's broker, e.g. redis://host:6379/0 (production, CI). The default is kombu's "
    "filesystem transport under PORTAL_VAR_DIR/broker, for make run.",
)
BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Must exceed the longest task and every countdown, or Redis redelivers early.
        "visibility_timeout": 4 * 3600,
        "socket_timeout": 5,
        "socket_connect_timeout": 3,
    }
# A web request must not hang when the broker is down (FACTS: ~19 s by default).
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ROUTES = {
    "instances.tasks.provision_instance": {"queue": "provisioning"},
    "instances.tasks.start_instance": {"queue": "provisioning"},
    "instances.tasks.stop_instance": {"queue": "provisioning"},
    "instances.tasks.terminate_instance": {"queue": "provisioning"},
}
# The periodic tasks: each app's settings module adds its own (instances, billing, audit).
CELERY_BEAT_SCHEDULE: dict[str, dict] = {}

PORTAL_DEMO_PASSWORD = env_str(
    "PORTAL_DEMO_PASSWORD",
    "gpu-demo-2026",
    help="Password of the demo users seed_demo creates (a changed password is never reset).",
)
