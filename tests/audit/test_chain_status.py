"""The audit pages and the API say where each row stands against the chain: in it, not sealed
yet, or outside the sealed chain (a row ``audit_verify`` reports), for a whole page of rows in
a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.services import audit_chain_seal
from tests.audit.conftest import MIDNIGHT, PERIOD, T0, forge, make_events

pytestmark = pytest.mark.django_db

URL = "/api/v1/audit/events/"


@dataclass
class Forged:
    backdated: int
    pending: int


@pytest.fixture
def forged(hour, clock, carol) -> Forged:
    """The hour, then: seq -7 claiming carol deleted a quota at 23:31; a row claiming 23:07,
    given the next number and sealed at 00:05; and bob's row of 00:05:10, not sealed yet."""
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forge(seq=-7, time=T0 + timedelta(minutes=31), actor_id=carol.pk)
    backdated = forge(time=T0 + timedelta(minutes=7), actor_id=carol.pk)
    clock.move_to(MIDNIGHT + PERIOD)
    audit_chain_seal()
    bobs_time = MIDNIGHT + PERIOD + timedelta(seconds=10)
    (pending,) = make_events(1, start=bobs_time, actor_username="bob")
    clock.move_to(MIDNIGHT + PERIOD + timedelta(minutes=1))
    return Forged(backdated=backdated, pending=pending.seq)


def html(response) -> BeautifulSoup:
    assert response.status_code == 200, response.content[:500]
    return BeautifulSoup(response.content, "html.parser")


def test_the_api_says_where_each_row_stands(api_as, ada, hour, forged):
    response = api_as(ada).get(URL, {"page_size": 100})
    assert response.status_code == 200
    rows = {row["seq"]: row for row in response.json()["results"]}
    standing = {seq: (row["chain_status"], row["chain_note"]) for seq, row in rows.items()}
    assert standing[-7] == ("outside", "the database never issued this sequence number")
    assert standing[forged.backdated] == (
        "outside",
        "dated earlier than the period it was sealed into allows",
    )
    assert standing[forged.pending] == ("pending", "")
    assert standing[hour.periods[0][0]] == ("sealed", "")
    assert rows[-7]["actor"]["username"] == "carol" and rows[-7]["method"] == "DELETE"
    assert sum(status == "sealed" for status, _note in standing.values()) == 55


def test_the_api_reads_a_row_numbered_below_one(api_as, ada, forged):
    response = api_as(ada).get(f"{URL}-7/")
    assert response.status_code == 200
    assert (response.json()["path"], response.json()["chain_status"]) == (
        "/api/v1/quotas/1/",
        "outside",
    )


def badges(page: BeautifulSoup) -> dict[str, list[str]]:
    return {
        row.select_one("td a").text: [badge.text for badge in row.select(".chain-badge")]
        for row in page.select("tbody tr.audit-row")
    }


def test_the_audit_page_badges_the_rows_outside_the_chain_and_the_pending_one(
    web, ada, hour, forged
):
    client = web(ada)
    assert badges(html(client.get("/audit/?actor=carol"))) == {
        f"#{forged.backdated}": ["outside the sealed chain"],
        "#-7": ["outside the sealed chain"],
    }
    assert badges(html(client.get("/audit/?actor=bob"))) == {
        f"#{forged.pending}": ["not sealed yet"]
    }
    newest_sealed = f"#{hour.periods[-1][-1]}"
    assert badges(html(client.get("/audit/")))[newest_sealed] == []
    title = html(client.get("/audit/?actor=carol")).select_one(".chain-badge-outside")["title"]
    assert title == (
        "dated earlier than the period it was sealed into allows; audit_verify reports it"
    )


def test_a_forged_row_opens_with_the_reason_it_is_outside_the_chain(web, ada, forged):
    page = html(web(ada).get("/audit/events/-7/"))
    assert "The database never issued this sequence number." in page.text
    assert "Not in the hash chain." in page.text
    sealed = html(web(ada).get(f"/audit/events/{forged.backdated}/"))
    assert "Dated earlier than the period it was sealed into allows." in sealed.text
    assert "under checkpoint 13" in sealed.text


def test_my_activity_shows_carol_the_rows_forged_in_her_name_as_outside_the_chain(
    web, carol, forged
):
    page = html(web(carol).get("/activity/"))
    badges = {
        row.select_one("a")["href"]: [badge.text for badge in row.select(".chain-badge")]
        for row in page.select("tbody tr.audit-row")
    }
    assert badges["/audit/events/-7/"] == ["outside the sealed chain"]
    assert badges[f"/audit/events/{forged.backdated}/"] == ["outside the sealed chain"]


def test_a_forged_row_whose_summary_is_not_json_does_not_break_the_log(web, api_as, ada, forged):
    seq = forge(time=MIDNIGHT + PERIOD, body_summary="{not json")
    assert web(ada).get("/audit/").status_code == 200
    assert "{not json" in html(web(ada).get(f"/audit/events/{seq}/")).text
    row = api_as(ada).get(f"{URL}{seq}/").json()
    assert row["body_summary"] == {"_not_json": "{not json"}


def queries(client, url: str, expect_rows: int) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    shown = (
        len(response.json()["results"])
        if url.startswith(URL)
        else len(html(response).select("tbody tr.audit-row"))
    )
    assert shown == expect_rows
    return len(captured.captured_queries)


def test_the_audit_page_costs_the_same_queries_for_two_rows_or_fifty(web, ada, forged):
    client = web(ada)
    assert queries(client, "/audit/?actor=carol", 2) == queries(client, "/audit/", 50)


def test_the_api_costs_the_same_queries_for_two_rows_or_two_hundred(api_as, ada, forged):
    make_events(150, start=MIDNIGHT + PERIOD, seqs=range(3000, 3150))
    client = api_as(ada)
    two = queries(client, f"{URL}?actor=carol", 2)
    assert two == queries(client, f"{URL}?page_size=200", 200)
    assert two <= 10
