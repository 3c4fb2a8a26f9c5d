"""Fixtures for the audit tests: rows by request id, the fault switch, tampering, bulk rows."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent


@pytest.fixture
def faults(settings):
    """Turn on the test-only fault switch (X-Portal-Fault)."""
    settings.PORTAL_FAULT_INJECTION = True
    return settings


@pytest.fixture
def web():
    """A browser-like client that gets a 500 page back instead of the view's exception."""

    def make(user=None) -> Client:
        client = Client(raise_request_exception=False)
        if user is not None:
            client.force_login(user)
        return client

    return make


def rows_for(response) -> list[AuditEvent]:
    """The audit rows written for one response, found by the request id it carried."""
    return list(AuditEvent.objects.filter(request_id=response["X-Request-ID"]))


def row_for(response) -> AuditEvent:
    rows = rows_for(response)
    assert len(rows) == 1, f"{len(rows)} audit rows for {response['X-Request-ID']}"
    return rows[0]


@contextlib.contextmanager
def tampering():
    """Let a test edit the append-only tables, the way an attacker with database access
    would: on PostgreSQL with triggers disabled for the transaction."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
        yield


def make_events(
    count: int, *, start=None, step_ms: int = 10, seqs=None, **fields
) -> list[AuditEvent]:
    """Insert ``count`` plausible rows fast (bulk_create), one every ``step_ms``; ``seqs``
    gives them chosen sequence numbers instead of the next ones."""
    start = start or timezone.now() - timedelta(milliseconds=step_ms * count)
    values = {
        "request_id": "",
        "actor_id": 7,
        "actor_username": "alice",
        "actor_role": "researcher",
        "auth_method": "session",
        "source_ip": "10.0.0.7",
        "user_agent": "pytest",
        "method": "GET",
        "route": "api/v1/^instance-types/$",
        "view_name": "instance-type-list",
        "query": "",
        "status": 200,
        "outcome": "success",
        "duration_us": 1500,
        "app_version": "0.1.0",
    }
    values.update(fields)
    rows = []
    for index in range(count):
        row = dict(values)
        row.setdefault("path", f"/api/v1/instance-types/?page={index}")
        row["request_id"] = values["request_id"] or f"bulk-{index:08d}"
        if seqs is not None:
            row["seq"] = seqs[index]
        rows.append(AuditEvent(time=start + timedelta(milliseconds=step_ms * index), **row))
    return AuditEvent.objects.bulk_create(rows, batch_size=5000)
