"""audit/services/events.py: the writers of audit rows (docs/design.md rule 1).

Other apps record what their tasks and commands change with :func:`audit_record_system`, and
name the object a view acted on with :func:`audit_set_object`; the middleware records every
web request by itself (through :func:`audit_event_insert`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from functools import cache
from importlib import metadata
from typing import Any

from django.db import connection
from django.utils import timezone

from audit.lib import chain
from audit.lib.context import current_request_id, current_task_started, new_request_id
from audit.lib.redaction import canonical_json, clean_identifier, clean_text, redact_data
from audit.models import (
    SYSTEM_ACTOR_PREFIX,
    AuditEvent,
    Outcome,
)


@cache
def app_version() -> str:
    try:
        return metadata.version("gpu-portal")
    except metadata.PackageNotFoundError:
        return "unknown"


_INSERT_SQL: dict[tuple[str, bool], str] = {}


def _insert_sql(relaxed: bool) -> str:
    key = (connection.vendor, relaxed)
    if key not in _INSERT_SQL:
        quote = connection.ops.quote_name
        table = quote(AuditEvent._meta.db_table)
        columns = ", ".join(quote(name) for name in chain.CONTENT_FIELDS)
        marks = ", ".join(["%s"] * len(chain.CONTENT_FIELDS))
        if relaxed:
            # Still one statement: the setting is made while it runs and read at its commit.
            _INSERT_SQL[key] = (
                f"INSERT INTO {table} ({columns}) SELECT {marks} "  # noqa: S608 - model names
                "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed"
            )
        else:
            _INSERT_SQL[key] = f"INSERT INTO {table} ({columns}) VALUES ({marks})"  # noqa: S608
    return _INSERT_SQL[key]


def audit_event_insert(*, fields: dict[str, Any], durable: bool = True) -> None:
    """Insert one event row: exactly one SQL statement, in the caller's transaction.

    The middleware's path, run on every request: a prepared INSERT without the ORM's save
    machinery or a RETURNING clause. ``fields`` holds every column in ``CONTENT_FIELDS``;
    values are adapted the way the ORM adapts them, so both paths store the same text.

    ``durable=False`` is for the rows of safe requests, committed on their own: on PostgreSQL
    their commit does not wait for the WAL to reach the disk (``synchronous_commit=off`` for
    that one transaction), which saves the flush on every read. A PostgreSQL crash can then
    lose the read rows of the last few hundred milliseconds (3 x wal_writer_delay); it cannot
    reorder or corrupt them. Rows of changes always commit durably, with the change.
    """
    relaxed = not durable and connection.vendor == "postgresql" and not connection.in_atomic_block
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        adapt(fields[name]) if name == "time" else fields[name] for name in chain.CONTENT_FIELDS
    ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(relaxed), params)


def audit_set_actor(request, user, *, auth_method: str = "password") -> None:
    """Name who acted when the request itself is not signed in, e.g. an endpoint that takes a
    username and password in its body and issues a token: the row then shows that person."""
    target = getattr(request, "_request", request)
    target.audit_actor = user
    target.audit_auth = auth_method


def audit_set_object(request, object_ref: str) -> None:
    """Name the object a view acted on (``order:<uuid>``) when the URL does not say it, e.g.
    after a create. Works with Django and DRF requests alike."""
    target = getattr(request, "_request", request)
    target.audit_object = object_ref


def body_digest(body: bytes, *, keyed: bool) -> str:
    """SHA-256 of the request body; keyed (HMAC) when the body held a secret, so that the
    stored digest cannot be used to guess the secret offline."""
    if keyed:
        return "hmac-sha256:" + hmac.new(chain.signing_key(), body, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def audit_record_system(
    *,
    name: str,
    action: str = "",
    object_ref: str = "",
    outcome: str = Outcome.SUCCESS,
    summary: dict[str, Any] | None = None,
    error: str = "",
    kind: str = "task",
    duration_us: int | None = None,
    request_id: str | None = None,
) -> AuditEvent:
    """Record a state change made by a Celery task or a management command.

    The actor is ``system:<name>``; the request id is the one that caused the work (carried
    into Celery tasks by their headers) or a new one. Call it inside the service's transaction
    so that the row exists exactly when the change does; after a rollback, call it again with
    ``outcome="error"``. Cheap: one INSERT. Not for beat ticks that change nothing.

    ``duration_us``, unless the caller measured it: inside a Celery task, how long the task had
    run when it recorded the change (at least 1 µs, so "measured" shows); elsewhere 0, unknown.
    """
    if duration_us is None:
        started = current_task_started.get()
        duration_us = 0 if started is None else max(1, (time.perf_counter() - started) * 1e6)
    fields = {
        "time": timezone.now(),
        "request_id": request_id or current_request_id.get() or new_request_id(),
        "actor_id": None,
        "actor_username": clean_text(f"{SYSTEM_ACTOR_PREFIX}{name}", 150),
        "actor_role": "system",
        "auth_method": "system",
        "source_ip": "",
        "user_agent": "",
        "method": "COMMAND" if kind == "command" else "TASK",
        "route": "",
        "view_name": clean_text(name, 200),
        "path": "",
        "query": "",
        "status": 0,
        "outcome": Outcome(outcome).value,
        "duration_us": max(0, int(duration_us)),
        "object_ref": clean_identifier(object_ref),
        "action": clean_text(action, 64),
        "error": clean_text(error, 200),
        "body_bytes": None,
        "body_digest": "",
        "body_summary": canonical_json(redact_data(summary)) if summary else "",
        "app_version": app_version(),
    }
    return AuditEvent.objects.create(**fields)
