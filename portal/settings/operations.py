"""Operations: logging, /metrics, health."""

from __future__ import annotations

from portal.lib.env import env_bool, env_float, env_str
from portal.settings.audit import MIDDLEWARE  # the audit middleware first, then ours after it
from portal.settings.base import CELERY_BROKER_URL, SECURE_REDIRECT_EXEMPT

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {
        "handlers": ["console"],
        "level": env_str("PORTAL_LOG_LEVEL", "INFO", help="The root log level."),
    },
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        # A job's TensorBoard logs each read of its folder at INFO.
        "tensorboard": {"level": "WARNING"},
        # httpx logs each request at INFO: every webhook delivery, every notebook request.
        "httpx": {"level": "WARNING"},
    },
}


# --- Operations (issue 14): metrics, structured logs, health ---------------------------------
# /metrics in the Prometheus text format, for a scraper holding this bearer token; unset, the
# page does not exist (404). portal/metrics.py says what it holds.
PORTAL_METRICS_TOKEN = env_str(
    "PORTAL_METRICS_TOKEN",
    help="The bearer token a scraper sends to read /metrics; unset, /metrics answers 404.",
)
METRICS_MIDDLEWARE = "portal.middleware.MetricsMiddleware"
# The folder where gunicorn and Celery worker processes keep their counters so that one scrape
# sums them (prometheus-client's multiprocess mode). It must be set in the environment of every
# process before it starts, be shared by them (one host, or one volume), and be emptied when
# they all stop; unset, each process counts for itself (runserver, tests).
PORTAL_METRICS_DIR = env_str(
    "PROMETHEUS_MULTIPROC_DIR",
    help="Folder where every web and worker process keeps its counters, so one scrape sums "
    "them. Set it for every process before it starts, share it between them, empty it when "
    "all have stopped. Unset: each process counts for itself.",
)
# Scrape-time gauges are each app's own, registered in its AppConfig.ready() (audit/registry.py).
# Right after audit (which stays first, to stamp every answer with its request id): it times and
# counts every answer of the middleware below and the views. Audit's own refusals (413, 414,
# 431) are in the audit log, not in these counts.
MIDDLEWARE.insert(MIDDLEWARE.index("audit.middleware.AuditMiddleware") + 1, METRICS_MIDDLEWARE)
# Prometheus scrapes over the internal network in plain http.
SECURE_REDIRECT_EXEMPT.append(r"^metrics$")
# Seconds /health/ waits for workers to answer a ping.
PORTAL_HEALTH_PING_SECONDS = env_float(
    "PORTAL_HEALTH_PING_SECONDS",
    1.0,
    help="Seconds /health/ waits for the Celery workers to answer a ping.",
)
# text (default: readable, for make run) or json (one object per line, for log collectors);
# either way every line carries the request id of the request or task it belongs to.
PORTAL_LOG_FORMAT = env_str(
    "PORTAL_LOG_FORMAT",
    "text",
    help="text (readable) or json (one object per line, for log collectors); every line "
    "carries the request id.",
)
if PORTAL_LOG_FORMAT not in {"text", "json"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"PORTAL_LOG_FORMAT is text or json, not {PORTAL_LOG_FORMAT!r}.")
LOGGING["filters"] = {"request_id": {"()": "audit.lib.logs.RequestIdFilter"}}
LOGGING["formatters"] = {
    "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    "json": {"()": "audit.lib.logs.JsonFormatter"},
}
LOGGING["handlers"]["console"].update(formatter=PORTAL_LOG_FORMAT, filters=["request_id"])
# The development server's line per request ("GET /hosts/rows/ HTTP/1.1" 200): off by default,
# since the pages' htmx polls print about 45 a minute and scroll make run's banner away; its
# 4xx and 5xx lines (warnings, errors) still print. gunicorn's access log is its own setting.
PORTAL_REQUEST_LOG = env_bool(
    "PORTAL_REQUEST_LOG",
    False,
    help="1 prints the development server's line per request (make run); 0 prints only its "
    "4xx and 5xx lines.",
)
LOGGING["loggers"]["django.server"] = {
    "handlers": ["console"],
    "level": "INFO" if PORTAL_REQUEST_LOG else "WARNING",
    "propagate": False,
}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu warns "No hostname was supplied" each time it copies a connection whose URL has no
    # host, which a folder never has: noise in make run's output every few seconds.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}
# --- end of operations settings ----------------------------------------------------------------
