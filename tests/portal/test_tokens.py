"""Personal API tokens: shown once, stored hashed, expiring, revocable, recorded when used."""

from __future__ import annotations

import logging
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.utils import timezone

from portal.models import ApiToken
from portal.services import token_issue
from tests.conftest import PASSWORD

URL = "/api/v1/auth/tokens/"


@pytest.fixture
def issued(api, alice):
    response = api.post(
        URL, {"username": "alice", "password": PASSWORD, "name": "laptop"}, format="json"
    )
    assert response.status_code == 201, response.json()
    return response.json()


def bearer(api, secret):
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


def test_username_and_password_in_token_out_once(clock, issued, api, alice):
    assert issued["token"].startswith("gpp_") and issued["name"] == "laptop"
    assert issued["state"] == "active"
    expires = timezone.datetime.fromisoformat(issued["expires_at"])
    assert expires - timezone.now() == timedelta(days=30)  # the clock stood still
    listed = bearer(api, issued["token"]).get(URL).json()["results"]
    assert [row["prefix"] for row in listed] == [issued["prefix"]]
    assert "token" not in listed[0]


def test_a_token_authenticates_api_calls_and_records_its_last_use(issued, api):
    response = bearer(api, issued["token"]).get("/api/v1/instances/")
    assert response.status_code == 200
    assert ApiToken.objects.get(pk=issued["id"]).last_used_at is not None


def test_the_raw_token_is_stored_nowhere_in_the_database_or_the_logs(api, alice, caplog):
    caplog.set_level(logging.DEBUG)
    response = api.post(
        URL, {"username": "alice", "password": PASSWORD, "name": "ci"}, format="json"
    )
    secret = response.json()["token"]
    bearer(api, secret).get("/api/v1/projects/")
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT * FROM {quoted}")  # noqa: S608 - table names from introspection
            for row in cursor.fetchall():
                assert not any(secret in str(value) for value in row), f"found in {table}"
    assert secret not in caplog.text


def test_wrong_password_gets_401_and_no_token(api, alice):
    response = api.post(URL, {"username": "alice", "password": "nope", "name": "x"}, format="json")
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_credentials"
    assert not ApiToken.objects.exists()


def test_an_expired_token_is_refused(boundary_clock, api, alice):
    _, secret = token_issue(user=alice, name="old", days=1)
    boundary_clock.shift(timedelta(days=1, seconds=-1))  # its last second
    assert bearer(api, secret).get("/api/v1/instances/").status_code == 200
    boundary_clock.shift(timedelta(seconds=1))
    response = bearer(api, secret).get("/api/v1/instances/")
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_token"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token_is_refused(issued, api):
    client = bearer(api, issued["token"])
    assert client.delete(f"{URL}{issued['id']}/").status_code == 204
    assert client.get("/api/v1/instances/").status_code == 401


def test_a_token_lives_at_most_90_days(api, alice):
    response = api.post(
        URL, {"username": "alice", "password": PASSWORD, "name": "x", "days": 91}, format="json"
    )
    assert response.status_code == 400
    assert "1 to 90 days" in response.json()["detail"]


def test_nobody_revokes_someone_elses_token(api_as, alice, bob):
    token, _ = token_issue(user=alice, name="mine")
    assert api_as(bob).delete(f"{URL}{token.pk}/").status_code == 404
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def test_the_tokens_page_shows_a_new_token_once(client, alice):
    client.force_login(alice)
    posted = client.post("/account/tokens/", {"name": "notebook", "days": "7"})
    assert (posted.status_code, posted["Location"]) == (302, "/account/tokens/")
    response = client.get("/account/tokens/")
    secret = ApiToken.objects.get()
    html = response.content.decode()
    assert response["Cache-Control"] == "no-store"
    assert "gpp_" in html and "will not be shown again" in html
    assert "Created the token notebook." in html
    again = client.get("/account/tokens/").content.decode()
    assert secret.prefix in again
    shown = html.split('id="new-token">')[1].split("<")[0]
    assert shown.startswith("gpp_") and shown not in again


def test_reloading_after_creating_a_token_creates_no_second_one(client, alice):
    """Post, redirect, get: the browser's reload repeats the GET, not the POST."""
    client.force_login(alice)
    response = client.post("/account/tokens/", {"name": "ci", "days": "7"}, follow=True)
    assert response.redirect_chain == [("/account/tokens/", 302)]
    client.get(response.request["PATH_INFO"])
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_the_secret_is_not_kept_in_the_session_once_shown(client, alice):
    client.force_login(alice)
    client.post("/account/tokens/", {"name": "ci"})
    assert "portal:issued-token" in client.session
    client.get("/account/tokens/")
    assert "portal:issued-token" not in client.session


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ({"name": "", "days": "7"}, "name", "Name the token, e.g. 'laptop' or 'CI'."),
        ({"name": "ci", "days": "0"}, "days", "A token lives 1 to 90 days."),
        ({"name": "ci", "days": "soon"}, "days", "Give the days as a whole number, e.g. 30."),
    ],
)
def test_a_bad_token_form_is_said_at_its_field(client, alice, data, field, says):
    client.force_login(alice)
    response = client.post("/account/tokens/", data)
    html = unescape(response.content.decode())
    assert response.status_code == 400
    assert f'<div class="field-error" id="id_{field}-error"><p>{says}</p></div>' in html
    assert f'aria-describedby="id_{field}-error"' in html
    assert f'value="{data["days"]}"' in html
    assert not ApiToken.objects.exists()


def test_revoking_from_the_page_says_it_was_revoked(client, alice):
    token, _ = token_issue(user=alice, name="old laptop")
    client.force_login(alice)
    response = client.post("/account/tokens/", {"revoke": token.pk}, follow=True)
    html = response.content.decode()
    assert f"Revoked old laptop ({token.prefix}…)" in html
    assert 'data-confirm="Revoke old laptop?"' not in html  # revoked: nothing left to confirm
    token.refresh_from_db()
    assert token.revoked_at is not None
