"""Webhooks: who may be called, how long an attempt may take, when a failed one is tried again."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from portal.lib.env import env_bool, env_int, env_list, env_str
from portal.settings.base import CELERY_BEAT_SCHEDULE, DEBUG

PORTAL_WEBHOOK_KEY = env_str(
    "PORTAL_WEBHOOK_KEY",
    help="Encrypts the webhook signing secrets the portal keeps (a Fernet key: make one with "
    "python3 -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'). "
    "Unset, a key derived from DJANGO_SECRET_KEY stands in, so changing that key then makes "
    "every webhook's secret unreadable (rotate them after).",
)
PORTAL_WEBHOOK_ALLOW_PRIVATE = env_bool(
    "PORTAL_WEBHOOK_ALLOW_PRIVATE",
    DEBUG,
    help="1 lets webhooks call plain http:// and private, loopback and link-local addresses "
    "(development, tests, a receiver inside the network). 0, the default outside development, "
    "refuses them when a webhook is saved and again at each delivery: the portal is never a "
    "way into its own network.",
    doc_default="the value of DJANGO_DEBUG",
)
PORTAL_WEBHOOK_TIMEOUT_SECONDS = env_int(
    "PORTAL_WEBHOOK_TIMEOUT_SECONDS",
    10,
    help="Seconds one delivery attempt may take (connecting and the answer together).",
)
_RETRIES = env_list(
    "PORTAL_WEBHOOK_RETRY_SECONDS",
    "5,300,1800,7200,18000,36000,36000",
    help="Seconds to wait before each retry of a failed delivery (the Standard Webhooks "
    "schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); after the last one the delivery is "
    "failed and waits for a person to resend it.",
)
if not all(value.isdigit() and int(value) > 0 for value in _RETRIES):
    raise ImproperlyConfigured(
        f"PORTAL_WEBHOOK_RETRY_SECONDS must be whole numbers of seconds, not {_RETRIES!r}."
    )
PORTAL_WEBHOOK_RETRY_SECONDS = [int(value) for value in _RETRIES]
PORTAL_WEBHOOK_SECONDS = env_int(
    "PORTAL_WEBHOOK_SECONDS",
    15,
    help="Seconds between the worker's passes over deliveries that are due (retries, and "
    "first attempts a lost task never made).",
)
PORTAL_WEBHOOKS_PER_PROJECT = env_int(
    "PORTAL_WEBHOOKS_PER_PROJECT",
    20,
    help="Webhooks one project may have; one more answers 409 too_many_webhooks.",
)
PORTAL_WEBHOOK_SECRET_OVERLAP_HOURS = env_int(
    "PORTAL_WEBHOOK_SECRET_OVERLAP_HOURS",
    24,
    help="Hours a rotated-out signing secret keeps signing beside the new one.",
)

CELERY_BEAT_SCHEDULE.update(
    {
        "deliver-webhooks": {
            "task": "portal.tasks.deliver_due_webhooks",
            "schedule": PORTAL_WEBHOOK_SECONDS,
        },
    }
)
