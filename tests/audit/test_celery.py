"""Tasks and commands that change state write audit rows, with the request id that caused them.

The id travels in the task's message headers (``before_task_publish``) and is restored while the
task runs (``task_prerun``), so a worker's row and the web request's row share it.
"""

from __future__ import annotations

from io import StringIO

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.management import call_command

from audit.lib.context import current_request_id
from audit.models import AuditEvent
from audit.services import audit_record_system
from portal.celery import app as portal_app
from tests.audit import celery_app


@pytest.fixture
def worker():
    """A real Celery worker thread on the tests' in-memory broker."""
    try:
        with start_worker(celery_app.app, perform_ping_check=False, shutdown_timeout=30):
            yield
    finally:
        # start_worker made the test app the default one; give the portal its app back.
        portal_app.set_current()
        portal_app.set_default()


def _empty_queue() -> None:
    """Tests before this one in the worker may have left tasks on the in-memory broker (a
    poll sent with a countdown): the message read must be this test's own."""
    with celery_app.app.connection() as connection:
        connection.SimpleQueue("celery").clear()


def test_a_published_task_carries_the_request_id_in_its_headers(db):
    _empty_queue()
    token = current_request_id.set("req-publish-0001")
    try:
        celery_app.record_change.delay("project:vision-lab")
    finally:
        current_request_id.reset(token)
    with celery_app.app.connection() as connection:
        message = connection.SimpleQueue("celery").get(timeout=5)
        message.ack()
    assert message.headers["portal_request_id"] == "req-publish-0001"


def test_a_task_published_outside_a_request_carries_no_id(db):
    _empty_queue()
    celery_app.record_change.delay("project:vision-lab")
    with celery_app.app.connection() as connection:
        message = connection.SimpleQueue("celery").get(timeout=5)
        message.ack()
    assert "portal_request_id" not in message.headers


@pytest.mark.urls("tests.audit.urls")
@pytest.mark.django_db(transaction=True)
def test_a_workers_row_shares_the_request_id_of_the_call_that_queued_it(web, ada, worker):
    response = web(ada).post("/api/test/enqueue/", {}, content_type="application/json")
    assert response.status_code == 202
    rows = _wait_for_rows(response["X-Request-ID"], 2)
    web_row, task_row = sorted(rows, key=lambda row: row.seq)
    assert web_row.path == "/api/test/enqueue/"
    assert (task_row.actor_username, task_row.actor_role, task_row.method) == (
        "system:tests.audit.record_change",
        "system",
        "TASK",
    )
    assert (task_row.object_ref, task_row.action) == ("project:queued", "test.change")


def test_an_eager_task_inside_a_request_keeps_its_id(db):
    token = current_request_id.set("req-eager-00002")
    try:
        celery_app.record_change.apply(args=["instance:abc"])
    finally:
        current_request_id.reset(token)
    row = AuditEvent.objects.get()
    assert (row.request_id, row.object_ref) == ("req-eager-00002", "instance:abc")
    assert current_request_id.get() is None


def test_a_task_with_no_cause_gets_a_fresh_request_id(db):
    celery_app.record_change.apply(args=["instance:abc"])
    assert len(AuditEvent.objects.get().request_id) == 32


def test_a_system_row_redacts_its_summary_and_escapes_its_text(db):
    row = audit_record_system(
        name="instances.reconcile",
        kind="command",
        action="instance.repair\x1b[31m",
        summary={"instance": "i-1", "aws_secret_access_key": "abc", "note": "AKIAIOSFODNN7EXAMPLE"},
        request_id="req-cmd-000003",
    )
    row.refresh_from_db()
    assert (row.actor_username, row.method, row.status, row.request_id) == (
        "system:instances.reconcile",
        "COMMAND",
        0,
        "req-cmd-000003",
    )
    assert row.action == "instance.repair\\x1b[31m"
    assert row.body_summary == (
        '{"aws_secret_access_key":"[REDACTED]","instance":"i-1","note":"[REDACTED]"}'
    )


def test_a_command_that_changes_state_records_itself(db):
    call_command("audit_seal", stdout=StringIO())
    row = AuditEvent.objects.get()
    assert (row.actor_username, row.method, row.action) == (
        "system:audit_seal",
        "COMMAND",
        "audit.seal",
    )


def _wait_for_rows(request_id: str, count: int, timeout: float = 15.0) -> list[AuditEvent]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(AuditEvent.objects.filter(request_id=request_id))
        if len(rows) >= count:
            return rows
        time.sleep(0.05)
    pytest.fail(f"only {len(rows)} of {count} rows for {request_id} after {timeout} s")
