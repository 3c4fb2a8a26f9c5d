"""GET /api/v1/audit/events/: admins search the log; nobody else reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.audit.conftest import make_events

URL = "/api/v1/audit/events/"


@pytest.fixture
def log(alice, bob, fin):
    """A small log: alice's calls yesterday, bob's failures today, a system row."""
    yesterday = timezone.now() - timedelta(days=1)
    make_events(3, start=yesterday, actor_id=alice.pk, actor_username="alice")
    make_events(
        2,
        actor_id=bob.pk,
        actor_username="bob",
        method="POST",
        path="/api/v1/orders/",
        status=409,
        outcome="denied",
        object_ref="order:7d1c",
    )
    make_events(
        1,
        actor_id=None,
        actor_username="system:instances.reconcile",
        actor_role="system",
        method="TASK",
        path="",
        status=0,
        outcome="error",
    )


@pytest.fixture
def as_ada(api_as, ada):
    return api_as(ada)


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_an_admin_reads_the_log_newest_first(as_ada, log):
    rows = results(as_ada.get(URL))
    assert len(rows) == 6
    assert [row["seq"] for row in rows] == sorted((row["seq"] for row in rows), reverse=True)
    first = rows[-1]
    assert first["actor"] == {"id": first["actor"]["id"], "username": "alice", "role": "researcher"}
    assert {"request_id", "route", "view_name", "duration_ms", "object", "body_digest"} <= set(
        first
    )


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("actor=alice", 3),
        ("actor=ALICE", 3),
        ("actor=system:instances.reconcile", 1),
        ("method=post", 2),
        ("method=TASK", 1),
        ("status=409", 2),
        ("status=4xx", 2),
        ("status=2xx", 3),
        ("outcome=denied", 2),
        ("outcome=error", 1),
        ("path=orders", 2),
        ("object=7d1c", 2),
        ("q=reconcile", 1),
        ("request_id=bulk-00000000", 3),
    ],
)
def test_each_filter_narrows_the_log(as_ada, log, query, count):
    assert len(results(as_ada.get(f"{URL}?{query}"))) == count


def test_a_time_range_selects_by_when_the_call_happened(boundary_clock, as_ada, log):
    today = timezone.now().date().isoformat()
    assert len(results(as_ada.get(f"{URL}?since={today}"))) == 3
    assert len(results(as_ada.get(f"{URL}?until={today}"))) == 3
    start = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    assert len(results(as_ada.get(f"{URL}?since={start}&actor=alice"))) == 3


def test_one_row_by_its_sequence_number(as_ada, log):
    seq = results(as_ada.get(URL))[0]["seq"]
    assert as_ada.get(f"{URL}{seq}/").json()["seq"] == seq
    assert as_ada.get(f"{URL}999999/").status_code == 404


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("status=abc", "status", "status accepts a code such as 404 or a class such as 4xx"),
        ("status=9xx", "status", "9xx is not a status"),
        ("since=yesterday", "since", "Enter a date, or a date and a 24-hour time, in UTC"),
        ("method=FETCH", "method", "FETCH is not a method; method accepts GET"),
        ("outcome=fine", "outcome", "outcome accepts success, denied or error"),
    ],
)
def test_a_bad_filter_answers_400_saying_what_to_send(as_ada, log, query, field, says):
    response = as_ada.get(f"{URL}?{query}")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] in ("invalid", "invalid_choice")
    assert says in body["detail"]
    assert says in " ".join(body["fields"][field])


@pytest.mark.parametrize("persona", ["alice", "fin"])
def test_researchers_and_finance_are_refused(api_as, log, persona, request):
    response = api_as(request.getfixturevalue(persona)).get(URL)
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert "/activity/" in response.json()["detail"]


def test_a_stranger_is_refused(api, log):
    assert api.get(URL).status_code in (401, 403)


def test_the_log_cannot_be_written_through_the_api(as_ada, log):
    assert as_ada.post(URL, {}, format="json").status_code == 405
    seq = results(as_ada.get(URL))[0]["seq"]
    assert as_ada.delete(f"{URL}{seq}/").status_code == 405
    assert as_ada.patch(f"{URL}{seq}/", {"status": 200}, format="json").status_code == 405


def test_the_schema_documents_the_audit_endpoint(as_ada):
    schema = as_ada.get("/api/v1/schema/?format=json").json()
    assert "/api/v1/audit/events/" in schema["paths"]
    names = [p["name"] for p in schema["paths"]["/api/v1/audit/events/"]["get"]["parameters"]]
    assert {"actor", "since", "until", "method", "status", "outcome", "path", "object"} <= set(
        names
    )
