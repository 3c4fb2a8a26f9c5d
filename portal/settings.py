"""Settings for the GPU host portal: one module, driven by environment variables.

A server started without settings is a production server: ``DJANGO_DEBUG`` defaults to 0, which
requires a secret key and an audit signing key. Development turns it on explicitly
(``DJANGO_DEBUG=1``, as ``make run`` does); the other defaults need no services (SQLite and a
filesystem broker under ``var/``, the simulated cloud). See ``.env.example`` for every variable.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF

from portal.env import env_bool, env_float, env_int, env_list, env_required, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
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
    "portal.middleware.LoginRequiredMiddleware",
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
    "DEFAULT_THROTTLE_RATES": {"auth-token": env_str("PORTAL_TOKEN_RATE", "10/minute")},
    # Throttles key on the address the audit log records, never on a client's X-Forwarded-For.
    "NUM_PROXIES": env_int("PORTAL_TRUSTED_PROXIES", 0),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU host portal API",
    "DESCRIPTION": "Order TensorFlow-ready GPU hosts, watch them run, see what they cost.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
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
        "PoolStatusEnum": "instances.pools.Pool.Status",
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
# Seconds a simulated host takes to boot (stopping and terminating take a fraction of it).
PORTAL_SIMULATED_BOOT_SECONDS = env_int("PORTAL_SIMULATED_BOOT_SECONDS", 6)
# Seconds every simulated cloud call takes; the chaos tests raise it to widen crash windows.
PORTAL_SIMULATED_API_LATENCY_SECONDS = env_float("PORTAL_SIMULATED_API_LATENCY_SECONDS", 0)
# Chance per hour that the simulated market takes back a running spot host.
PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR = env_float("PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR", 0)
# Faults of the simulated cloud, all off by default (instances.providers.faults.Faults):
# seconds a host call's reply takes after the cloud acted; the chance a launch, stop, start or
# terminate takes effect and then times out; launches that ignore the ClientToken (as moto);
# the chance a call starts a throttling burst, and how many calls a burst refuses.
PORTAL_SIMULATED_REPLY_LATENCY_SECONDS = env_float("PORTAL_SIMULATED_REPLY_LATENCY_SECONDS", 0)
PORTAL_SIMULATED_LOST_REPLY_RATE = env_float("PORTAL_SIMULATED_LOST_REPLY_RATE", 0)
PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = env_bool("PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS", False)
PORTAL_SIMULATED_THROTTLE_RATE = env_float("PORTAL_SIMULATED_THROTTLE_RATE", 0)
PORTAL_SIMULATED_THROTTLE_BURST_CALLS = env_int("PORTAL_SIMULATED_THROTTLE_BURST_CALLS", 5)
AWS_EC2_INSTANCE_TYPES = env_list(
    "AWS_EC2_INSTANCE_TYPES",
    "g5.xlarge,g6.xlarge,g6e.xlarge,p4d.24xlarge,p4de.24xlarge,p5.48xlarge,p5e.48xlarge",
)
AWS_ENDPOINT_URL = env_str("AWS_ENDPOINT_URL")
# One subnet per availability zone, in order of preference: a launch that finds no capacity in
# one zone tries the next, and a spot replacement tries the zone that lost its host last.
# PORTAL_EC2_SUBNET_ID (one subnet) is still read when the list is not set.
PORTAL_EC2_SUBNET_IDS = env_list("PORTAL_EC2_SUBNET_IDS", env_str("PORTAL_EC2_SUBNET_ID"))
PORTAL_EC2_SECURITY_GROUP_IDS = env_list("PORTAL_EC2_SECURITY_GROUP_IDS")
PORTAL_EC2_INSTANCE_PROFILE = env_str("PORTAL_EC2_INSTANCE_PROFILE")
PORTAL_EC2_KMS_KEY_ID = env_str("PORTAL_EC2_KMS_KEY_ID")
PORTAL_EC2_ROOT_VOLUME_GB = env_int("PORTAL_EC2_ROOT_VOLUME_GB", 200)

# GPU telemetry and the idle stop (instances/services/telemetry.py, idle.py).
# How often readings are gathered from the simulated cloud and idle hosts are looked for.
PORTAL_TELEMETRY_SECONDS = env_int("PORTAL_TELEMETRY_SECONDS", 60)
PORTAL_IDLE_CHECK_SECONDS = env_int("PORTAL_IDLE_CHECK_SECONDS", 60)
# Minute readings are kept this long, then folded into hourly ones.
PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS = env_int("PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS", 48)
# A reading up to this far ahead of the portal's clock is clamped to now; further is refused.
PORTAL_TELEMETRY_MAX_SKEW_SECONDS = env_int("PORTAL_TELEMETRY_MAX_SKEW_SECONDS", 120)
# A host whose latest reading is older than this has no recent telemetry: never judged idle.
PORTAL_TELEMETRY_FRESH_MINUTES = env_int("PORTAL_TELEMETRY_FRESH_MINUTES", 3)
# Where a host's agent posts its readings (the portal's address as the hosts reach it).
PORTAL_AGENT_URL = env_str("PORTAL_AGENT_URL", "http://localhost:8000")

# Orders.
PORTAL_LEASE_DEFAULT_HOURS = env_int("PORTAL_LEASE_DEFAULT_HOURS", 24)
PORTAL_LEASE_MAX_HOURS = env_int("PORTAL_LEASE_MAX_HOURS", 168)
# How many hours before a lease ends its owner is warned (a notice and an email, once each).
try:
    PORTAL_LEASE_NOTICE_HOURS = sorted(
        {int(value) for value in env_list("PORTAL_LEASE_NOTICE_HOURS", "24,1")}, reverse=True
    )
except ValueError:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PORTAL_LEASE_NOTICE_HOURS must be whole hours separated by commas, e.g. 24,1."
    ) from None
PORTAL_ORDER_MAX_COUNT = env_int("PORTAL_ORDER_MAX_COUNT", 8)
# Checks order_submit runs under the project lock, in order (quota, budget, ...); each is a
# callable(order_request) that raises to refuse.
ORDER_ADMISSION_CHECKS: list[str] = ["instances.quotas.quota_check"]
# What an order page and the approval inbox show before an order is placed or approved: the
# headroom of each limit, callable(order_request) -> list[instances.limits.Headroom].
ORDER_LIMITS: list[str] = ["instances.quotas.quota_headroom"]
# Quotas are defined in portal and counted in instances: callable(keys) -> {key: Usage} for many
# (project id, member id or None) keys at once; and callable(values) -> (values, problems)
# checks of the names a quota's limits use, run before a quota is saved.
PORTAL_QUOTA_USAGE = "instances.quotas.usage_of"
PORTAL_QUOTA_VALIDATORS: list[str] = ["instances.quotas.quota_catalog_problems"]
# Run when a project's limits change (its quota set or removed, its budget set or removed), in
# the changing transaction: callable(project=...). The pools held by a refusal retry at once.
PORTAL_LIMITS_MOVED: list[str] = ["instances.services.pools_retry_now"]
# The names the Quotas page offers in its rows: callable() -> portal.quota_rows.QuotaChoices.
PORTAL_QUOTA_CHOICES = "instances.quotas.quota_choices"
# The badge on the Approvals link: callable(user) -> how many held orders the user may decide.
PORTAL_APPROVALS_WAITING = "instances.selectors.orders_to_decide_count"
# The dashboard's panels, in order: callable(user, projects) -> portal.panels.Panel.
PORTAL_DASHBOARD_PANELS: list[str] = [
    "instances.panels.operations_panel",
    "instances.panels.summary_panel",
    "instances.panels.quota_panel",
    "instances.panels.hosts_panel",
    "instances.panels.pools_panel",
]
# Days an order may wait for approval before it expires (a project's policy may say otherwise).
PORTAL_APPROVAL_EXPIRY_DAYS = env_int("PORTAL_APPROVAL_EXPIRY_DAYS", 3)
# Personal API tokens: default and longest lifetime, in days.
PORTAL_TOKEN_DEFAULT_DAYS = env_int("PORTAL_TOKEN_DEFAULT_DAYS", 30)
PORTAL_TOKEN_MAX_DAYS = env_int("PORTAL_TOKEN_MAX_DAYS", 90)

# Provisioning: retries of transient cloud errors, and the reconciler's thresholds.
PORTAL_PROVISION_MAX_RETRIES = env_int("PORTAL_PROVISION_MAX_RETRIES", 5)
PORTAL_PROVISION_RETRY_BACKOFF_SECONDS = env_int("PORTAL_PROVISION_RETRY_BACKOFF_SECONDS", 5)
PORTAL_RECONCILE_SECONDS = env_int("PORTAL_RECONCILE_SECONDS", 30)
PORTAL_RECONCILE_STUCK_SECONDS = env_int("PORTAL_RECONCILE_STUCK_SECONDS", 120)
# How many times reconcile sends lost work again before it gives up (a launch then fails).
PORTAL_RECONCILE_MAX_RETRIES = env_int("PORTAL_RECONCILE_MAX_RETRIES", 5)
PORTAL_ORPHAN_GRACE_SECONDS = env_int("PORTAL_ORPHAN_GRACE_SECONDS", 300)
# A host the cloud does not list is a ghost only after this long unseen (describe lags launch).
PORTAL_GHOST_GRACE_SECONDS = env_int("PORTAL_GHOST_GRACE_SECONDS", 180)
# Tagged on every cloud resource; reconcile touches only hosts of its own deployment, so that
# staging and production may share an account.
PORTAL_DEPLOYMENT = env_str("PORTAL_DEPLOYMENT", "default")

# Spot recovery (instances.services.recovery). The SQS queue an EventBridge rule feeds with EC2's
# "Spot Instance Interruption Warning" and "Instance Rebalance Recommendation" events (empty: the
# portal reads the simulated cloud's warnings directly, and reconcile catches interruptions), the
# endpoint to reach it at (moto, LocalStack), and how often beat drains it.
PORTAL_SPOT_EVENTS_QUEUE_URL = env_str("PORTAL_SPOT_EVENTS_QUEUE_URL")
PORTAL_SPOT_EVENTS_ENDPOINT_URL = env_str("PORTAL_SPOT_EVENTS_ENDPOINT_URL")
PORTAL_SPOT_EVENTS_SECONDS = env_int("PORTAL_SPOT_EVENTS_SECONDS", 10)
# How long before it takes a spot host back the simulated cloud warns (EC2: about two minutes).
PORTAL_SPOT_WARNING_LEAD_SECONDS = env_int("PORTAL_SPOT_WARNING_LEAD_SECONDS", 120)
# Most replacement hosts one order may launch (relaunch_spot, fallback_on_demand).
PORTAL_SPOT_MAX_REPLACEMENTS = env_int("PORTAL_SPOT_MAX_REPLACEMENTS", 3)
# Pools (instances/services/pools.py, autoscaler.py): the largest max_size, the autoscaler's
# beat period, the backoff of a refused scale-out (doubling from the first figure up to the
# second), how long a market and type without capacity is left alone, how long before its lease
# ends a pool host's replacement launches, and how long the per-pass samples behind the pool
# chart are kept.
PORTAL_POOL_MAX_SIZE = env_int("PORTAL_POOL_MAX_SIZE", 64)
PORTAL_AUTOSCALE_SECONDS = env_int("PORTAL_AUTOSCALE_SECONDS", 60)
PORTAL_POOL_BACKOFF_SECONDS = env_int("PORTAL_POOL_BACKOFF_SECONDS", 60)
PORTAL_POOL_BACKOFF_MAX_SECONDS = env_int("PORTAL_POOL_BACKOFF_MAX_SECONDS", 900)
PORTAL_POOL_CAPACITY_HOLD_SECONDS = env_int("PORTAL_POOL_CAPACITY_HOLD_SECONDS", 300)
PORTAL_POOL_LEASE_HANDOVER_SECONDS = env_int("PORTAL_POOL_LEASE_HANDOVER_SECONDS", 1800)
PORTAL_POOL_SAMPLE_RETENTION_DAYS = env_int("PORTAL_POOL_SAMPLE_RETENTION_DAYS", 14)
# Checkpoints: an S3 prefix under which each order gets <project>/<order>/ (s3://bucket/prefix);
# empty on the simulated cloud means a local folder under PORTAL_CHECKPOINT_LOCAL_DIR.
PORTAL_CHECKPOINT_S3_PREFIX = env_str("PORTAL_CHECKPOINT_S3_PREFIX")
PORTAL_CHECKPOINT_LOCAL_DIR = Path(
    env_str("PORTAL_CHECKPOINT_LOCAL_DIR", str(VAR_DIR / "checkpoints"))
)

PORTAL_DEMO_PASSWORD = env_str("PORTAL_DEMO_PASSWORD", "gpu-demo-2026")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("PORTAL_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# --- Audit log (issue 5) -------------------------------------------------------------------
# First in the chain so it sees every answer, including other middleware's refusals.
MIDDLEWARE.insert(0, "audit.middleware.AuditMiddleware")
# Off only to measure what audit costs (make bench); read on every request.
PORTAL_AUDIT_ENABLED = env_bool("PORTAL_AUDIT_ENABLED", True)
# Who reads the whole log (everyone reads their own activity): callable(user) -> bool.
AUDIT_LOG_READER = "portal.permissions.can_read_audit_log"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Audit makes every API read a write. SQLite's default journal syncs the disk on every
    # commit (~1 ms here); in WAL mode with synchronous=NORMAL a commit is durable against a
    # crash of the portal and only the last commits can be lost to a power cut, which suits
    # the embedded default (production runs PostgreSQL). WAL also lets readers run alongside
    # the writer, which web, worker and beat sharing one file need.
    DATABASES["default"]["OPTIONS"]["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"
    )
# Safe requests under these paths are audited too; unsafe requests are audited everywhere.
PORTAL_AUDIT_PATH_PREFIXES = ["/api/", "/admin/", "/audit/"]
# ... except these, which serve code rather than data (the admin's JavaScript catalog).
PORTAL_AUDIT_QUIET_PATHS = ["/admin/jsi18n/"]
# Signs the chain's checkpoints (HMAC-SHA256). Not SECRET_KEY: rotating one must not touch
# the other, and whoever can read one need not be able to forge the other.
AUDIT_SIGNING_KEY_MIN_BYTES = 32
if DEBUG:
    PORTAL_AUDIT_SIGNING_KEY = (
        env_str("PORTAL_AUDIT_SIGNING_KEY") or "dev-only-audit-signing-key-never-use-in-production"
    )
else:
    PORTAL_AUDIT_SIGNING_KEY = env_required("PORTAL_AUDIT_SIGNING_KEY", when=PRODUCTION_NEEDS)
    # HMAC-SHA256 takes any key, but a short one can be guessed, and with it every checkpoint
    # forged: refuse to start rather than sign with it. 32 bytes is SHA-256's own output size.
    if len(PORTAL_AUDIT_SIGNING_KEY.encode("utf-8")) < AUDIT_SIGNING_KEY_MIN_BYTES:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"PORTAL_AUDIT_SIGNING_KEY is {len(PORTAL_AUDIT_SIGNING_KEY.encode('utf-8'))} bytes; "
            f"it must be at least {AUDIT_SIGNING_KEY_MIN_BYTES} bytes when DJANGO_DEBUG=0. "
            "Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
PORTAL_AUDIT_SEAL_SECONDS = env_int("PORTAL_AUDIT_SEAL_SECONDS", 300)
PORTAL_AUDIT_RETENTION_DAYS = env_int("PORTAL_AUDIT_RETENTION_DAYS", 400)
PORTAL_AUDIT_S3_BUCKET = env_str("PORTAL_AUDIT_S3_BUCKET")
PORTAL_AUDIT_S3_PREFIX = env_str("PORTAL_AUDIT_S3_PREFIX", "audit/")
PORTAL_AUDIT_S3_ENDPOINT_URL = env_str("PORTAL_AUDIT_S3_ENDPOINT_URL")
# How many reverse proxies of ours stand in front of the portal; X-Forwarded-For is believed
# only that far, so a client cannot choose the source address recorded for it.
PORTAL_TRUSTED_PROXIES = env_int("PORTAL_TRUSTED_PROXIES", 0)
CELERY_BEAT_SCHEDULE.update(
    {
        "audit-seal": {
            "task": "audit.tasks.seal_audit_chain",
            "schedule": PORTAL_AUDIT_SEAL_SECONDS,
        },
        "audit-export": {"task": "audit.tasks.export_audit_log", "schedule": 3600},
        "audit-retention": {"task": "audit.tasks.apply_audit_retention", "schedule": 86400},
    }
)
# --- end of audit settings -------------------------------------------------------------------

# --- Billing ---------------------------------------------------------------------------------
# The budget check runs after the quota check, under the same project lock.
ORDER_ADMISSION_CHECKS.append("billing.budgets.budget_check")
ORDER_LIMITS.append("billing.budgets.budget_headroom")
# Each project's spend against its budget, on its dashboard card.
PORTAL_DASHBOARD_PANELS.append("billing.panels.budget_panel")
# Finance's home: spend by project, budgets at risk and the month's trend, above the cards.
PORTAL_DASHBOARD_PANELS.append("billing.panels.spend_panel")
# Seconds between metering passes (usage rows, then the daily rollups they changed) and between
# budget checks (threshold notices, the stop-hosts policy).
PORTAL_METER_SECONDS = env_int("PORTAL_METER_SECONDS", 60)
PORTAL_BUDGET_CHECK_SECONDS = env_int("PORTAL_BUDGET_CHECK_SECONDS", 60)
# Alert thresholds a new budget starts with, in percent of the monthly amount.
try:
    PORTAL_BUDGET_THRESHOLDS = sorted(
        {int(value) for value in env_list("PORTAL_BUDGET_THRESHOLDS", "50,80,100")}
    )
except ValueError:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PORTAL_BUDGET_THRESHOLDS must be whole percentages separated by commas, e.g. 50,80,100."
    ) from None
# Where AWS Cost and Usage Reports are read from for reconciliation (the page can name another
# key); an endpoint for MinIO or moto.
PORTAL_CUR_S3_BUCKET = env_str("PORTAL_CUR_S3_BUCKET")
PORTAL_CUR_S3_PREFIX = env_str("PORTAL_CUR_S3_PREFIX")
PORTAL_CUR_S3_ENDPOINT_URL = env_str("PORTAL_CUR_S3_ENDPOINT_URL")
CELERY_BEAT_SCHEDULE.update(
    {
        "meter-usage": {"task": "billing.tasks.meter_usage", "schedule": PORTAL_METER_SECONDS},
        "check-budgets": {
            "task": "billing.tasks.check_budgets",
            "schedule": PORTAL_BUDGET_CHECK_SECONDS,
        },
    }
)
# Run by the catalog's writers (sync, the admin) after a type's list price is set, with the type:
# billing keeps the price history. callable(*, instance_type).
INSTANCE_PRICE_HOOKS: list[str] = ["billing.prices.list_price_record"]
# What a host has cost so far (host pages, the instances API): billing's metering, so that the
# live figure is the bill. callable(instances, *, now) -> {instance pk: Decimal dollars}.
PORTAL_INSTANCE_COST = "billing.metering.costs_so_far"
# What a host costs per hour now (My hosts' running total): billing's rule, the one budgets
# commit with. callable(instance) -> Decimal dollars per hour.
PORTAL_INSTANCE_RATE = "billing.budgets.host_rate_per_hour"
# --- end of billing settings -----------------------------------------------------------------

# --- Operations (issue 14): metrics, structured logs, health ---------------------------------
# /metrics in the Prometheus text format, for a scraper holding this bearer token; unset, the
# page does not exist (404). portal/metrics.py says what it holds.
PORTAL_METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN")
METRICS_MIDDLEWARE = "portal.metrics_http.MetricsMiddleware"
# The folder where gunicorn and Celery worker processes keep their counters so that one scrape
# sums them (prometheus-client's multiprocess mode). It must be set in the environment of every
# process before it starts, be shared by them (one host, or one volume), and be emptied when
# they all stop; unset, each process counts for itself (runserver, tests).
PORTAL_METRICS_DIR = env_str("PROMETHEUS_MULTIPROC_DIR")
# Scrape-time gauges, each app's own (the ORDER_ADMISSION_CHECKS device: no upward import).
PORTAL_METRICS_COLLECTORS: list[str] = [
    "portal.celery_ops.collect_queues",
    "portal.celery_ops.collect_beat",
    "audit.metrics.collect",
    "instances.metrics.collect_hosts",
    "instances.metrics.collect_pools",
    "billing.metrics.collect",
]
# Right after audit (which stays first, to stamp every answer with its request id): it times and
# counts every answer of the middleware below and the views. Audit's own refusals (413, 414,
# 431) are in the audit log, not in these counts.
MIDDLEWARE.insert(MIDDLEWARE.index("audit.middleware.AuditMiddleware") + 1, METRICS_MIDDLEWARE)
# Prometheus scrapes over the internal network in plain http.
SECURE_REDIRECT_EXEMPT.append(r"^metrics$")
# Seconds /health/ waits for workers to answer a ping.
PORTAL_HEALTH_PING_SECONDS = env_float("PORTAL_HEALTH_PING_SECONDS", 1.0)
# text (default: readable, for make run) or json (one object per line, for log collectors);
# either way every line carries the request id of the request or task it belongs to.
PORTAL_LOG_FORMAT = env_str("PORTAL_LOG_FORMAT", "text")
if PORTAL_LOG_FORMAT not in {"text", "json"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"PORTAL_LOG_FORMAT is text or json, not {PORTAL_LOG_FORMAT!r}.")
LOGGING["filters"] = {"request_id": {"()": "audit.logs.RequestIdFilter"}}
LOGGING["formatters"] = {
    "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    "json": {"()": "audit.logs.JsonFormatter"},
}
LOGGING["handlers"]["console"].update(formatter=PORTAL_LOG_FORMAT, filters=["request_id"])
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu warns "No hostname was supplied" each time it copies a connection whose URL has no
    # host, which a folder never has: noise in make run's output every few seconds.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}
# --- end of operations settings ----------------------------------------------------------------
