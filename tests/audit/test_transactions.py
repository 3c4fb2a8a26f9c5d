"""A request's changes and its audit row commit together, or the change does not happen.

A failure after the save rolls the change back and still leaves one row saying 500; a row that
cannot be written fails the request closed (503) with nothing changed. On PostgreSQL the
services' own transactions, row locks and on-commit hooks keep working inside the middleware's
transaction, and on-commit hooks run only once the row is committed.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import DatabaseError, connection, connections, transaction

from audit.models import AuditEvent
from portal.models import Project
from tests.audit.conftest import row_for, rows_for

CHANGE_FORM = {
    "slug": "vision-lab",
    "name": "Vision Lab (renamed)",
    "description": "",
    "is_active": "on",
    "memberships-TOTAL_FORMS": "0",
    "memberships-INITIAL_FORMS": "0",
}


def test_a_fault_after_an_admin_save_leaves_the_project_unchanged_and_one_500_row(
    web, ada, projects, faults
):
    vision = projects["vision-lab"]
    response = web(ada).post(
        f"/admin/portal/project/{vision.pk}/change/",
        CHANGE_FORM,
        HTTP_X_PORTAL_FAULT="after-view",
    )
    assert response.status_code == 500
    vision.refresh_from_db()
    assert vision.name == "Vision Lab"
    row = row_for(response)
    assert (row.status, row.outcome, row.object_ref) == (
        500,
        "error",
        f"portal.project:{vision.pk}",
    )
    assert json.loads(row.body_summary)["name"] == "Vision Lab (renamed)"


@pytest.mark.urls("tests.audit.urls")
def test_a_fault_after_a_service_saved_rolls_the_new_project_back(web, ada, faults):
    response = web(ada).post(
        "/api/test/projects/",
        {"slug": "ghost-lab", "name": "Ghost"},
        content_type="application/json",
        HTTP_X_PORTAL_FAULT="after-view",
    )
    assert response.status_code == 500
    assert not Project.objects.filter(slug="ghost-lab").exists()
    row = row_for(response)
    assert (row.status, row.outcome, row.method) == (500, "error", "POST")
    assert AuditEvent.objects.count() == 1


@pytest.mark.urls("tests.audit.urls")
def test_without_a_fault_the_change_and_its_row_both_commit(web, ada):
    response = web(ada).post(
        "/api/test/projects/", {"slug": "real-lab", "name": "Real"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert Project.objects.filter(slug="real-lab").exists()
    assert row_for(response).status == 201


@pytest.mark.urls("tests.audit.urls")
def test_when_the_row_cannot_be_written_the_request_fails_closed_and_changes_nothing(
    web, ada, monkeypatch
):
    def broken_insert(*, fields, durable=True):
        raise DatabaseError("audit table unavailable")

    monkeypatch.setattr("audit.middleware.audit_event_insert", broken_insert)
    response = web(ada).post(
        "/api/test/projects/", {"slug": "lost-lab", "name": "Lost"}, content_type="application/json"
    )
    assert response.status_code == 503
    assert response.json()["code"] == "audit_unavailable"
    assert response.json()["request_id"] == response["X-Request-ID"]
    assert response["Retry-After"] == "30"
    assert not Project.objects.filter(slug="lost-lab").exists()


def test_a_page_that_cannot_be_recorded_fails_closed_with_a_page(web, alice, monkeypatch):
    def broken_insert(*, fields, durable=True):
        raise DatabaseError("audit table unavailable")

    monkeypatch.setattr("audit.middleware.audit_event_insert", broken_insert)
    response = web(alice).post("/logout/")
    assert response.status_code == 503
    assert "Not carried out" in response.content.decode()
    assert response["X-Request-ID"] in response.content.decode()


def test_a_read_that_cannot_be_recorded_is_not_answered(web, alice, catalog, monkeypatch):
    def broken_insert(*, fields, durable=True):
        raise DatabaseError("audit table unavailable")

    monkeypatch.setattr("audit.middleware.audit_event_insert", broken_insert)
    response = web(alice).get("/api/v1/instance-types/")
    assert response.status_code == 503
    assert b"p5.48xlarge" not in response.content


def test_if_only_the_first_insert_fails_the_refusal_itself_is_recorded(
    web, ada, projects, monkeypatch
):
    from audit import services

    calls = []

    def flaky_insert(*, fields, durable=True):
        calls.append(fields["status"])
        if len(calls) == 1:
            raise DatabaseError("deadlock detected")
        return services.audit_event_insert(fields=fields, durable=durable)

    monkeypatch.setattr("audit.middleware.audit_event_insert", flaky_insert)
    vision = projects["vision-lab"]
    response = web(ada).post(f"/admin/portal/project/{vision.pk}/change/", CHANGE_FORM)
    assert response.status_code == 503
    vision.refresh_from_db()
    assert vision.name == "Vision Lab"
    row = row_for(response)
    assert (row.status, row.outcome, row.error) == (503, "error", "audit: AuditUnavailable")


@pytest.mark.urls("tests.audit.urls")
def test_a_view_that_swallows_a_database_error_cannot_commit_its_work(web, ada):
    response = web(ada).post("/api/test/doomed/", {}, content_type="application/json")
    assert response.status_code == 500
    assert response.json()["code"] == "server_error"
    assert not Project.objects.filter(slug="doomed").exists()
    assert (row_for(response).status, row_for(response).outcome) == (500, "error")


@pytest.mark.urls("tests.audit.urls")
def test_an_exception_message_is_not_stored_only_its_class(web, ada):
    response = web(ada).post(
        "/api/test/explodes/", {"password": "pw-in-error"}, content_type="application/json"
    )
    assert response.status_code == 500
    row = row_for(response)
    assert row.error == "builtins.ValueError"
    assert "pw-in-error" not in json.dumps(list(AuditEvent.objects.values()), default=str)


# --- PostgreSQL: real commits, row locks and on-commit hooks --------------------------------


def _in_another_connection(work):
    """Run ``work`` on a fresh database connection in another thread; return its result."""
    result = {}

    def run():
        try:
            result["value"] = work()
        except Exception as error:  # noqa: BLE001 - handed back to the test
            result["error"] = error
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return result


def _lock_now(pk) -> int:
    with transaction.atomic():
        return len(Project.objects.select_for_update(nowait=True).filter(pk=pk))


@pytest.mark.postgres
@pytest.mark.urls("tests.audit.urls")
@pytest.mark.django_db(transaction=True)
def test_on_commit_hooks_run_after_the_audit_row_committed(web, ada, monkeypatch):
    seen = {}

    def delay(object_ref):
        # Called from transaction.on_commit: the middleware's transaction must be over, and
        # another connection must already see both the project and the audit row.
        seen["in_atomic_block"] = connection.in_atomic_block
        seen["elsewhere"] = _in_another_connection(
            lambda: (
                Project.objects.filter(slug="queued").exists(),
                AuditEvent.objects.filter(path="/api/test/enqueue/").count(),
            )
        )

    monkeypatch.setattr("tests.audit.urls.record_change.delay", delay)
    response = web(ada).post("/api/test/enqueue/", {}, content_type="application/json")
    assert response.status_code == 202
    assert seen == {"in_atomic_block": False, "elsewhere": {"value": (True, 1)}}


@pytest.mark.postgres
@pytest.mark.urls("tests.audit.urls")
@pytest.mark.django_db(transaction=True)
def test_on_commit_hooks_never_run_when_the_audit_row_fails(web, ada, monkeypatch):
    called = []
    monkeypatch.setattr("tests.audit.urls.record_change.delay", called.append)

    def broken_insert(*, fields, durable=True):
        raise DatabaseError("audit table unavailable")

    monkeypatch.setattr("audit.middleware.audit_event_insert", broken_insert)
    response = web(ada).post("/api/test/enqueue/", {}, content_type="application/json")
    assert response.status_code == 503
    assert called == []
    assert not Project.objects.filter(slug="queued").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_services_row_lock_holds_until_the_request_commits_and_then_frees(
    web, ada, projects, monkeypatch
):
    """portal.services.project_save runs in its own atomic block (a savepoint inside the
    middleware's transaction); a lock it takes must be held to the end of the request."""
    from portal import services

    vision = projects["vision-lab"]
    observed = {}
    original = services.project_save

    def save_with_lock(*, project):
        with transaction.atomic():
            Project.objects.select_for_update().get(pk=project.pk)
            saved = original(project=project)
        # The service's block is over, but the request's transaction is not: still locked.
        observed["during"] = _in_another_connection(lambda: _lock_now(project.pk))
        return saved

    monkeypatch.setattr("portal.admin.services.project_save", save_with_lock)
    response = web(ada).post(f"/admin/portal/project/{vision.pk}/change/", CHANGE_FORM)
    assert response.status_code == 302
    assert isinstance(observed["during"].get("error"), DatabaseError)
    after = _in_another_connection(lambda: _lock_now(vision.pk))
    assert after == {"value": 1}
    vision.refresh_from_db()
    assert vision.name == "Vision Lab (renamed)"
    assert len(rows_for(response)) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reads_row_skips_the_disk_flush_only_for_its_own_transaction(web, alice, catalog):
    response = web(alice).get("/api/v1/instance-types/")
    assert response.status_code == 200
    assert len(rows_for(response)) == 1
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_changes_row_commits_durably_with_the_change(web, ada, monkeypatch):
    from audit import services

    seen = []

    def spy(*, fields, durable=True):
        seen.append(durable)
        return services.audit_event_insert(fields=fields, durable=durable)

    monkeypatch.setattr("audit.middleware.audit_event_insert", spy)
    response = web(ada).post("/admin/auth/group/add/", {"name": "auditors"})
    assert response.status_code == 302
    assert seen == [True]
