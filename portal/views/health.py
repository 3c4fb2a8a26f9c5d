"""``/health/``: whether the database and the broker answer; how beat and the workers are."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.celery import app as celery_app
from portal.lib.celery_ops import health_report

log = logging.getLogger(__name__)


def _database_ok() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # noqa: BLE001 - any failure means "not healthy"
        log.warning("health: database check failed: %s", error)
        return False, type(error).__name__
    return True, "ok"


def _broker_ok() -> tuple[bool, str]:
    try:
        with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            # Opening a channel proves the transport works (a folder exists, Redis answers).
            conn.default_channel  # noqa: B018
    except Exception as error:  # noqa: BLE001
        log.warning("health: broker check failed: %s", error)
        return False, type(error).__name__
    return True, "ok"


@never_cache
@require_GET
@login_not_required
def health(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer; 503 naming the one that does not. Beat and
    the workers are reported with their reasons ("degraded" when one is missing)."""
    db_ok, db_state = _database_ok()
    broker_ok, broker_state = _broker_ok()
    body = {
        "status": "ok" if db_ok and broker_ok else "unavailable",
        "database": db_state,
        "broker": broker_state,
    }
    failing = [name for name, ok in (("database", db_ok), ("broker", broker_ok)) if not ok]
    if failing:
        body["failing"] = failing
    else:
        body.update(health_report())
        if body["beat"] != "ok" or body["workers"] != "ok":
            body["status"] = "degraded"
    return JsonResponse(body, status=200 if not failing else 503)
