"""On PostgreSQL the database itself refuses to change or empty the audit tables."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent, AuditPrune
from audit.services import audit_chain_seal, audit_retention_apply
from tests.audit.conftest import make_events

# The sealed periods are aged from now: the clock stands still while each test runs.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db, pytest.mark.usefixtures("clock")]

TABLES = ["audit_event", "audit_chain_link", "audit_checkpoint", "audit_prune"]


@pytest.fixture
def sealed(settings):
    settings.PORTAL_AUDIT_RETENTION_DAYS = 30
    make_events(10, start=timezone.now() - timedelta(days=60))
    audit_chain_seal(now=timezone.now() - timedelta(days=59))
    make_events(10)
    audit_chain_seal()


def refused(sql: str, *setup: str) -> str:
    """Run ``sql`` in a savepoint; return the database's refusal (the test fails if none)."""
    with (
        pytest.raises(DatabaseError) as refusal,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        for statement in setup:
            cursor.execute(statement)
        cursor.execute(sql)
    return str(refusal.value)


@pytest.mark.parametrize("table", TABLES)
def test_updating_an_audit_table_is_refused(sealed, table):
    audit_retention_apply()  # so audit_prune has a row too
    message = refused(f"UPDATE {table} SET {_column(table)} = {_column(table)}")  # noqa: S608
    assert f"the audit log is append-only: UPDATE on {table} refused" in message


@pytest.mark.parametrize("table", TABLES)
def test_deleting_from_an_audit_table_is_refused(sealed, table):
    audit_retention_apply()
    assert f"DELETE on {table} refused" in refused(f"DELETE FROM {table}")  # noqa: S608


@pytest.mark.parametrize("table", TABLES)
def test_truncating_an_audit_table_is_refused(sealed, table):
    # Test databases allow TRUNCATE by default so that transactional tests can be cleaned
    # up; switch that off to see what a production database does.
    message = refused(f"TRUNCATE {table}", "SET LOCAL portal.audit_allow_truncate = 'off'")
    assert f"TRUNCATE on {table} refused" in message


def test_the_orm_cannot_edit_or_delete_a_row_either(sealed):
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(seq=AuditEvent.objects.first().seq).update(path="/x/")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditCheckpoint.objects.all().delete()


def test_the_retention_door_opens_for_deletes_only(sealed):
    door = "SET LOCAL portal.audit_retention = 'on'"
    assert "UPDATE on audit_event refused" in refused("UPDATE audit_event SET path = ''", door)
    assert "TRUNCATE on audit_event refused" in refused(
        "TRUNCATE audit_event", door, "SET LOCAL portal.audit_allow_truncate = 'off'"
    )


@pytest.mark.django_db(transaction=True)
def test_the_door_closes_with_the_transaction(sealed):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL portal.audit_retention = 'on'")
    assert "DELETE on audit_event refused" in refused("DELETE FROM audit_event")


def test_retention_passes_the_trigger_for_whole_old_periods(sealed):
    prune = audit_retention_apply()
    assert prune.events_deleted == 10
    assert AuditEvent.objects.count() == 11  # today's ten and retention's own row
    assert AuditChainLink.objects.count() == 10
    assert AuditCheckpoint.objects.count() == 1
    assert AuditPrune.objects.count() == 1


def _column(table: str) -> str:
    return {
        "audit_event": "path",
        "audit_chain_link": "hash",
        "audit_checkpoint": "head_hash",
        "audit_prune": "head_hash",
    }[table]
