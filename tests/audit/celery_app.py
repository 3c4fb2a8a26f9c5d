"""A Celery app of the tests' own, on kombu's in-memory broker, with one task that records an
audit row. The audit signals are Celery-wide, so this exercises them without touching the
portal's broker or stealing its messages."""

from __future__ import annotations

from celery import Celery
from django.db import connection

from audit.services import audit_record_system

app = Celery("audit-tests", broker="memory://", set_as_current=False)
app.conf.update(
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=False,
)


@app.task(name="tests.audit.record_change", bind=True)
def record_change(self, object_ref: str) -> None:
    try:
        audit_record_system(
            name="tests.audit.record_change", action="test.change", object_ref=object_ref
        )
    finally:
        if not self.request.is_eager:
            # The worker thread has its own connection; let the test's teardown empty the
            # tables without waiting for it.
            connection.close()
