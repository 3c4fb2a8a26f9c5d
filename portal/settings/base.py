"""Django and its libraries: apps, middleware, database, sign-in, security headers, static
files, the REST API and its schema, the shared cache, Celery and beat."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF

from portal.env import env_bool, env_int, env_list, env_required, env_str

BASE_DIR = Path(__file__).resolve().parents[2]  # portal/settings/base.py -> the checkout
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

# Off unless asked for: a forgotten variable must never serve tracebacks to the internet.
DEBUG = env_bool("DJANGO_DEBUG", False)
PRODUCTION_NEEDS = "when DJANGO_DEBUG=0 (the default; DJANGO_DEBUG=1 for development)"
if DEBUG:
    SECRET_KEY = env_str("DJANGO_SECRET_KEY") or "dev-only-insecure-key-never-use-in-production"
else:
    SECRET_KEY = env_required("DJANGO_SECRET_KEY", when=PRODUCTION_NEEDS)

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

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
    "portal.axes_app.SignInAttemptsConfig",  # django-axes, named for the admin
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
    "portal.csp.CSPMiddleware",
    "django_permissions_policy.PermissionsPolicyMiddleware",
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
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
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
    "django.contrib.auth.backends.ModelBackend",
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
AXES_CLIENT_IP_CALLABLE = "audit.middleware.source_address"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
EMAIL_BACKEND = env_str("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DJANGO_DEFAULT_FROM_EMAIL", "GPU Portal <portal@localhost>")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
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
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^health/$"]
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp) on every answer: scripts, styles, images, fetches, forms
# and the base URL come from this origin only; no inline script, inline <style> or style=""
# attribute runs, nothing evals a string, no page can be framed. Pages keep their behaviour in
# static/js and their looks in static/css; htmx and Chart.js are served from static files.
# Scoped exceptions (the API's browsable pages) are in portal/csp.py; in DEBUG, django-csp
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
# Permissions-Policy (django-permissions-policy): the portal uses no device or sensor, so no
# page, and no frame in it, may ask for one. Copying the SSH command needs clipboard-write.
PERMISSIONS_POLICY: dict[str, list[str]] = {
    feature: []
    for feature in (
        "accelerometer",
        "ambient-light-sensor",
        "autoplay",
        "bluetooth",
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

# Request limits. Every request is measured against them before anything reads it (the audit
# middleware, first in line): a longer path or query answers 414, a longer header 431, a bigger
# body 413, each with {"code", "detail"} and an audit row. gunicorn (gunicorn.conf.py) refuses
# longer request lines and header fields itself, before Django, without a row.
# The largest JSON or form body; Django also applies it to the fields of a multipart form.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE", 1024 * 1024)
# The most fields a form or query string may have (Django answers 400 beyond it).
DATA_UPLOAD_MAX_NUMBER_FIELDS = env_int("DJANGO_DATA_UPLOAD_MAX_NUMBER_FIELDS", 1000)
# An uploaded file larger than this is spooled to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int("DJANGO_FILE_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)
# The largest multipart body, files included (a Cost and Usage Report upload).
PORTAL_MAX_UPLOAD_BYTES = env_int("PORTAL_MAX_UPLOAD_BYTES", 100 * 1024 * 1024)
# Characters of the path, of the query string, and of any one header value.
PORTAL_MAX_PATH_LENGTH = env_int("PORTAL_MAX_PATH_LENGTH", 2048)
PORTAL_MAX_QUERY_LENGTH = env_int("PORTAL_MAX_QUERY_LENGTH", 4096)
PORTAL_MAX_HEADER_LENGTH = env_int("PORTAL_MAX_HEADER_LENGTH", 8192)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.rest.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "portal.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.rest.exception_handler",
    # DRF's own parsers, answering 400 (not 500) for what they let through: JSON nested too
    # deeply, a form with too many fields.
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.JSONParser",
        "portal.parsers.FormParser",
        "portal.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "COERCE_DECIMAL_TO_STRING": True,
    # The token endpoint has its own limit, besides the per-account lockout.
    # The public schema costs seconds to generate: callers not signed in get it at this rate.
    "DEFAULT_THROTTLE_RATES": {
        "auth-token": env_str("PORTAL_TOKEN_RATE", "10/minute"),
        "anon-schema": env_str("PORTAL_SCHEMA_ANON_RATE", "30/minute"),
    },
    # Throttles key on the address the audit log records, never on a client's X-Forwarded-For.
    "NUM_PROXIES": env_int("PORTAL_TRUSTED_PROXIES", 0),
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
        "OrderStatusEnum": "instances.models.Order.Status",
        "PoolStatusEnum": "instances.models.Pool.Status",
    },
}

# A cache every process shares (Redis, e.g. redis://127.0.0.1:6379/1): DRF's throttles (the
# token endpoint's rate) then count across all gunicorn workers, and sessions are read from it
# before the database (cached_db: a sign-out still ends the session everywhere at once). Without
# one each process caches for itself, which suits the embedded default, and sessions stay in the
# database alone.
PORTAL_CACHE_URL = env_str("PORTAL_CACHE_URL")
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
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
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
CELERY_BEAT_SCHEDULE = {
    "reconcile-instances": {
        "task": "instances.tasks.reconcile",
        "schedule": env_int("PORTAL_RECONCILE_SECONDS", 30),
    },
    "expire-leases": {"task": "instances.tasks.expire_leases", "schedule": 60},
    "warn-leases": {
        "task": "instances.tasks.warn_leases",
        "schedule": env_int("PORTAL_LEASE_WARN_SECONDS", 60),
    },
    "expire-orders": {"task": "instances.tasks.expire_orders", "schedule": 3600},
    "collect-telemetry": {
        "task": "instances.tasks.collect_telemetry",
        "schedule": env_int("PORTAL_TELEMETRY_SECONDS", 60),
    },
    "compact-telemetry": {"task": "instances.tasks.compact_telemetry", "schedule": 3600},
    "stop-idle-hosts": {
        "task": "instances.tasks.stop_idle_hosts",
        "schedule": env_int("PORTAL_IDLE_CHECK_SECONDS", 60),
    },
    "drain-spot-events": {
        "task": "instances.tasks.drain_spot_events",
        "schedule": env_int("PORTAL_SPOT_EVENTS_SECONDS", 10),
    },
    "refresh-spot-prices": {
        "task": "billing.tasks.refresh_spot_prices",
        "schedule": env_int("PORTAL_SPOT_PRICE_REFRESH_SECONDS", 300),
    },
    "autoscale-pools": {
        "task": "instances.tasks.autoscale",
        "schedule": env_int("PORTAL_AUTOSCALE_SECONDS", 60),
    },
}


PORTAL_DEMO_PASSWORD = env_str("PORTAL_DEMO_PASSWORD", "gpu-demo-2026")
