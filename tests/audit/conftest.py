"""Fixtures for the audit tests: rows by request id, the fault switch, tampering, bulk rows,
forged rows."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from audit.lib import chain
from audit.models import AuditEvent
from audit.services import audit_chain_seal


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
    made = AuditEvent.objects.bulk_create(rows, batch_size=5000)
    if seqs is not None:
        sync_sequence()
    return made


# What the outside probe inserted: a row that reads "carol DELETE /api/v1/quotas/1/ 204".
FORGED = {
    "request_id": "forged-0001",
    "actor_id": 3,
    "actor_username": "carol",
    "actor_role": "researcher",
    "auth_method": "session",
    "source_ip": "10.0.0.3",
    "user_agent": "curl/8.5.0",
    "method": "DELETE",
    "route": "api/v1/^quotas/(?P<pk>[^/.]+)/$",
    "view_name": "quota-detail",
    "path": "/api/v1/quotas/1/",
    "query": "",
    "status": 204,
    "outcome": "success",
    "duration_us": 1800,
    "object_ref": "portal.quota:1",
    "action": "",
    "error": "",
    "body_bytes": None,
    "body_digest": "",
    "body_summary": "",
    "app_version": "0.1.0",
}


def forge(*, time, seq: int | None = None, as_owner: bool = True, **fields) -> int:
    """Insert one row with a plain INSERT, as anybody allowed to insert can (the append-only
    trigger lets inserts through), and return its number: ``seq``, or by default the next
    number the sequence gives, as an INSERT that leaves the number out gets.

    PostgreSQL's CHECK constraint refuses a number below 1, so for those the forger is the
    database's owner, who drops it first (in the test's transaction: it comes back when the
    test ends)."""
    values = {**FORGED, **fields, "time": connection.ops.adapt_datetimefield_value(time)}
    columns = ", ".join(["seq", *chain.CONTENT_FIELDS])
    marks = ", ".join(["%s"] * (1 + len(chain.CONTENT_FIELDS)))
    postgres = connection.vendor == "postgresql"
    with transaction.atomic(), connection.cursor() as cursor:
        if seq is None:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence('audit_event', 'seq'))"
                if postgres
                else "SELECT coalesce(max(seq), 0) + 1 FROM (SELECT seq FROM sqlite_sequence "
                "WHERE name = 'audit_event' UNION ALL SELECT max(seq) FROM audit_event)"
            )
            seq = cursor.fetchone()[0]
        if as_owner and seq <= 0 and postgres:
            cursor.execute(
                "ALTER TABLE audit_event DROP CONSTRAINT IF EXISTS audit_event_seq_positive"
            )
        cursor.execute(
            f"INSERT INTO audit_event ({columns}) VALUES ({marks})",  # noqa: S608 - fixed names
            [seq, *(values[name] for name in chain.CONTENT_FIELDS)],
        )
    return seq


def sync_sequence() -> None:
    """After rows were given chosen numbers, let PostgreSQL's sequence issue numbers above
    them, as it would have (SQLite's AUTOINCREMENT does by itself)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('audit_event', 'seq'), GREATEST("
            "(SELECT max(seq) FROM audit_event), "
            "(SELECT last_value FROM audit_event_seq_seq)))"
        )


# An hour of log at the end of a month, sealed every five minutes: see ``hour``.
T0 = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
PERIOD = timedelta(minutes=5)
MIDNIGHT = T0 + 12 * PERIOD


@dataclass
class Hour:
    periods: list[list[int]]  # the seqs sealed by checkpoints 1-12, in order
    old_gap: int  # a number never committed, inside checkpoint 5's range
    fresh_gap: int  # the same inside checkpoint 12's, the last one


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


@pytest.fixture
def hour(clock, settings, django_capture_on_commit_callbacks) -> Hour:
    """Twelve periods of five rows (30 s in, then every 50 s), numbered from 1000; the third
    period is quiet, and one number in the fifth and one in the last were taken by inserts that
    rolled back. Sealed at the end of each period, so the clock ends at midnight; each seal
    is published to the test's witness file, as its commit would."""
    settings.PORTAL_AUDIT_SEAL_SECONDS = 300
    numbers = iter(range(1000, 2000))
    periods: list[list[int]] = []
    gaps = []
    for index in range(12):
        begins = T0 + index * PERIOD
        seqs: list[int] = []
        if index != 2:
            seqs = [next(numbers) for _ in range(6 if index in (4, 11) else 5)]
            if index in (4, 11):
                gaps.append(seqs.pop(2))
            # No actor id: the personas' ids vary from test to test, and none of them made
            # these rows.
            make_events(
                5, start=begins + timedelta(seconds=30), step_ms=50_000, seqs=seqs, actor_id=None
            )
        clock.move_to(begins + PERIOD)
        with django_capture_on_commit_callbacks(execute=True):
            audit_chain_seal()
        periods.append(seqs)
    sync_sequence()
    return Hour(periods=periods, old_gap=gaps[0], fresh_gap=gaps[1])
