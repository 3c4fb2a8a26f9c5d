"""The Audit page (admins), its exports, and My activity (everybody, their own rows only)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from bs4 import BeautifulSoup
from django.http import StreamingHttpResponse

from audit.models import AuditEvent
from audit.services import audit_chain_seal
from tests.audit.conftest import make_events


@pytest.fixture
def log(alice, carol):
    make_events(3, actor_id=alice.pk, actor_username="alice", path="/api/v1/instances/")
    make_events(
        2,
        actor_id=carol.pk,
        actor_username="carol",
        method="POST",
        path="/api/v1/orders/",
        status=403,
        outcome="denied",
        object_ref="project:vision-lab",
    )
    make_events(1, actor_id=alice.pk, actor_username="alice", user_agent='=HYPERLINK("x")')


def page(response) -> BeautifulSoup:
    return BeautifulSoup(response.content, "html.parser")


def test_an_admin_sees_every_call_newest_first_in_the_portal_look(web, ada, log):
    response = web(ada).get("/audit/")
    assert response.status_code == 200
    html = page(response)
    assert html.select_one("h1").text == "Audit log"
    assert "portal.css" in response.content.decode()
    rows = html.select("tbody tr.audit-row")
    assert len(rows) == 6
    assert "carol" in rows[1].text and "alice" in rows[-1].text
    assert html.select_one('nav a[aria-current="page"]').text == "Audit"


def test_the_filters_narrow_the_page_and_stay_filled_in(web, ada, log):
    response = web(ada).get("/audit/?actor=carol&outcome=denied&status=4xx&path=orders")
    html = page(response)
    assert len(html.select("tbody tr.audit-row")) == 2
    assert html.select_one("#f-actor")["value"] == "carol"
    assert html.select_one("#f-status")["value"] == "4xx"
    assert html.select_one("input[name=outcome][value=denied]").has_attr("checked")
    assert "2 calls match these filters" in html.select_one(".page-head").text


def test_a_bad_filter_says_what_to_fix(web, ada, log):
    response = web(ada).get("/audit/?status=teapot")
    assert response.status_code == 400
    assert "teapot is not a status" in page(response).select_one(".alert-error").text


def test_the_page_is_paged(web, ada, log):
    make_events(120)
    client = web(ada)
    first = page(client.get("/audit/"))
    assert len(first.select("tbody tr.audit-row")) == 50
    assert "Page 1 of 3" in first.select_one(".audit-pager").text
    last = page(client.get("/audit/?page=3"))
    # 126 rows, and the visit to page 1 is the 127th: opening the log is audited too.
    assert len(last.select("tbody tr.audit-row")) == 27
    assert last.select_one('a[rel="prev"]')["href"] == "?page=2"


def test_paging_keeps_the_filters(web, ada, alice):
    make_events(60, actor_id=alice.pk, actor_username="alice")
    html = page(web(ada).get("/audit/?actor=alice"))
    assert html.select_one('a[rel="next"]')["href"] == "?actor=alice&page=2"
    # The export also leaves out the system rows the page hides.
    assert (
        html.select_one(".audit-exports a")["href"] == "/audit/export.csv?actor=alice&system=hide"
    )


def test_one_row_shows_every_field_and_its_place_in_the_chain(web, ada, log):
    audit_chain_seal()
    event = AuditEvent.objects.filter(actor_username="carol").first()
    html = page(web(ada).get(f"/audit/events/{event.seq}/"))
    text = html.text
    assert "project:vision-lab" in text and event.request_id in text
    assert "Sealed into the hash chain at position" in text


def test_the_csv_export_streams_the_filtered_log_safely_for_spreadsheets(web, ada, log):
    response = web(ada).get("/audit/export.csv?actor=alice")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 4
    assert {row["actor_username"] for row in rows} == {"alice"}
    # A cell that a spreadsheet would run as a formula is defused.
    assert rows[-1]["user_agent"] == '\'=HYPERLINK("x")'
    assert rows[0]["time"].endswith("Z")


def test_the_json_lines_export_streams_one_document_per_row(web, ada, log):
    response = web(ada).get("/audit/export.jsonl?outcome=denied")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [line["actor_username"] for line in lines] == ["carol", "carol"]
    assert lines[0]["seq"] < lines[1]["seq"]


def test_an_export_with_a_bad_filter_says_what_to_fix(web, ada, log):
    response = web(ada).get("/audit/export.csv?since=soon")
    assert response.status_code == 400
    assert b"since: Enter a date, or a date and a 24-hour time, in UTC" in response.content


@pytest.mark.parametrize("persona", ["alice", "fin"])
@pytest.mark.parametrize(
    "path", ["/audit/", "/audit/export.csv", "/audit/export.jsonl", "/admin/audit/auditevent/"]
)
def test_researchers_and_finance_cannot_open_the_log(web, log, fin, persona, path, request):
    response = web(request.getfixturevalue(persona)).get(path)
    assert response.status_code in (302, 403)
    assert b"carol" not in response.content


def test_my_activity_shows_only_my_own_rows(web, alice, log):
    response = web(alice).get("/activity/")
    assert response.status_code == 200
    html = page(response)
    assert html.select_one("h1").text == "My activity"
    rows = html.select("tbody tr.audit-row")
    assert len(rows) == 4
    assert "carol" not in response.content.decode()
    assert "/api/v1/orders/" not in response.content.decode()
    assert html.select_one('.menu-panel a[href="/activity/"]').text == "My activity"


def test_my_activity_filters_too(web, carol, log):
    html = page(web(carol).get("/activity/?outcome=success"))
    assert "Nothing of yours matches these filters" in html.text


def test_a_researcher_opens_her_own_row_but_not_anyone_elses(web, alice, log):
    mine = AuditEvent.objects.filter(actor_username="alice").first()
    theirs = AuditEvent.objects.filter(actor_username="carol").first()
    client = web(alice)
    assert client.get(f"/audit/events/{mine.seq}/").status_code == 200
    assert client.get(f"/audit/events/{theirs.seq}/").status_code == 404


def test_the_nav_shows_audit_to_admins_and_my_activity_to_everybody(web, ada, alice, fin, catalog):
    def links(user) -> list[str]:
        html = page(web(user).get("/catalog/"))
        return [a.text.strip() for a in html.select("nav.mainnav a, .usermenu .menu-panel a")]

    assert {"Audit", "My activity"} <= set(links(ada))
    assert "My activity" in links(alice) and "Audit" not in links(alice)
    assert "My activity" in links(fin) and "Audit" not in links(fin)


def test_opening_the_audit_page_is_itself_audited(web, ada, db):
    response = web(ada).get("/audit/?actor=bob")
    row = AuditEvent.objects.get(request_id=response["X-Request-ID"])
    assert (row.view_name, row.query) == ("audit-events", "actor=bob")


@pytest.fixture
def busy_log(alice):
    """Mostly the tasks' rows, as on the demo: beat's loops write one every few seconds."""
    make_events(2, actor_id=alice.pk, actor_username="alice", path="/api/v1/instances/")
    make_events(8, actor_id=None, actor_username="system:reconcile", method="TASK", path="")


def test_the_audit_page_hides_system_rows_until_asked(web, ada, busy_log):
    html = page(web(ada).get("/audit/"))
    rows = html.select("tbody tr.audit-row")
    assert len(rows) == 2 and all("alice" in row.text for row in rows)
    assert html.select_one("input[name=system][value=hide]").has_attr("checked")
    # The export holds what the page shows.
    assert html.select_one("a[download]")["href"] == "/audit/export.csv?system=hide"
    shown = page(web(ada).get("/audit/?system=all")).select("tbody tr.audit-row")
    assert sum("system:reconcile" in row.text for row in shown) == 8
    only = page(web(ada).get("/audit/?system=only")).select("tbody tr.audit-row")
    assert len(only) == 8 and all("system:reconcile" in row.text for row in only)


def test_the_api_still_lists_system_rows_by_default_and_refuses_a_bad_choice(api_as, ada, busy_log):
    def actors(query: str) -> list[str]:
        body = api_as(ada).get(f"/api/v1/audit/events/{query}").json()
        return [row["actor"]["username"] for row in body["results"]]

    assert actors("").count("system:reconcile") == 8
    assert "system:reconcile" not in actors("?system=hide")
    assert actors("?system=hide").count("alice") == 2
    refused = api_as(ada).get("/api/v1/audit/events/?system=maybe")
    assert refused.status_code == 400
    assert "system accepts all, hide or only" in refused.content.decode()


def test_the_filters_fold_on_a_phone_unless_some_are_set(web, ada, busy_log):
    fold = page(web(ada).get("/audit/")).select_one("details.audit-filters-fold")
    assert fold.has_attr("data-fold-narrow") and not fold.has_attr("data-keep-open")
    assert fold.select_one("form.audit-filters") is not None
    kept = page(web(ada).get("/audit/?actor=alice")).select_one("details.audit-filters-fold")
    assert kept.has_attr("data-keep-open")
