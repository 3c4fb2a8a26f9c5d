"""Settings for the GPU host portal: one module, driven by environment variables.

Defaults are safe for development (SQLite and a filesystem broker under ``var/``, the simulated
cloud); production sets ``DJANGO_DEBUG=0`` and must then provide a secret key. See
``.env.example`` for every variable.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from portal.env import env_bool, env_int, env_list, env_required, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", True)
if DEBUG:
    SECRET_KEY = env_str("DJANGO_SECRET_KEY") or "dev-only-insecure-key-never-use-in-production"
else:
    SECRET_KEY = env_required("DJANGO_SECRET_KEY", when="when DJANGO_DEBUG=0")

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
    "audit",
    "portal",
    "instances",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.middleware.LoginRequiredMiddleware",
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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "portal.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "catalog"

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
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = 12 * 3600

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.rest.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.rest.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "COERCE_DECIMAL_TO_STRING": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU host portal API",
    "DESCRIPTION": "Order TensorFlow-ready GPU hosts, watch them run, see what they cost.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from the installed sidecar package, never from a CDN at run time.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

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
CELERY_BEAT_SCHEDULE = {
    "refresh-spot-prices": {
        "task": "billing.tasks.refresh_spot_prices",
        "schedule": env_int("PORTAL_SPOT_PRICE_REFRESH_SECONDS", 300),
    },
}

# The cloud. `simulated` keeps a cloud inside the portal's database; `ec2` talks to AWS.
PORTAL_PROVIDER = env_str("PORTAL_PROVIDER", "simulated")
PORTAL_PROVIDERS = {
    "simulated": "instances.providers.simulated.SimulatedProvider",
    "ec2": "instances.providers.ec2.EC2Provider",
}
PORTAL_REGION = env_str("PORTAL_REGION", "us-east-1")
PORTAL_PRICE_FILE = Path(
    env_str("PORTAL_PRICE_FILE", str(BASE_DIR / "instances" / "catalog" / "prices.json"))
)
PORTAL_SIMULATED_SEED = env_int("PORTAL_SIMULATED_SEED", 7)
AWS_EC2_INSTANCE_TYPES = env_list(
    "AWS_EC2_INSTANCE_TYPES",
    "g5.xlarge,g6.xlarge,g6e.xlarge,p4d.24xlarge,p4de.24xlarge,p5.48xlarge,p5e.48xlarge",
)
AWS_ENDPOINT_URL = env_str("AWS_ENDPOINT_URL")

PORTAL_DEMO_PASSWORD = env_str("PORTAL_DEMO_PASSWORD", "gpu-demo-2026")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("PORTAL_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
