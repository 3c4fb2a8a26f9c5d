"""Every page but login and health needs a login; every API call needs authentication."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import PASSWORD

API = [
    "/api/v1/",
    "/api/v1/instance-types/",
    "/api/v1/instance-types/p5.48xlarge/",
    "/api/v1/images/",
    "/api/v1/projects/",
]


@pytest.mark.parametrize("path", ["/catalog/", "/"])
def test_anonymous_visitor_is_sent_to_login_and_back(client, db, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert f"next={path}" in response["Location"]


@pytest.mark.parametrize("path", API)
def test_anonymous_api_call_is_refused(client, catalog, path):
    response = client.get(path)
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "not_authenticated"


def test_anonymous_callers_read_the_schema_and_its_docs_but_call_nothing(client, catalog, projects):
    """The schema of a public API is public; what it describes still needs a login."""
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    assert "/api/v1/orders/" in schema.json()["paths"]
    # It names no catalog row, user or project: only what the API takes and answers.
    assert "g5.xlarge" not in schema.content.decode()
    assert "vision-lab" not in schema.content.decode()
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    assert "swagger-ui" in docs.content.decode()
    assert client.get("/api/v1/docs/?script").status_code == 200
    assert client.get("/api/v1/orders/").status_code == 401


def test_login_page_is_in_the_portal_look(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "GPU Portal" in html and "Sign in" in html
    assert "portal.css" in html


def test_alice_signs_in_and_lands_on_her_dashboard(client, alice, catalog):
    response = client.post("/login/", {"username": "alice", "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == "/dashboard/"
    assert "Hello, Alice" in response.content.decode()


def test_wrong_password_says_so_and_signs_nobody_in(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_sign_out_ends_the_session(client, alice):
    client.force_login(alice)
    response = client.post("/logout/")
    assert response.status_code == 200
    assert "You have signed out" in response.content.decode()
    assert client.get("/catalog/").status_code == 302


def test_only_admins_reach_the_django_admin(client, alice, ada):
    client.force_login(alice)
    assert client.get("/admin/").status_code == 302
    client.force_login(ada)
    assert client.get("/admin/").status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/admin/instances/instancetype/?gpu_model=H100",
        "/admin/instances/image/?q=2.17",
        "/admin/portal/project/?q=vision",
        "/admin/portal/membership/?role=member",
    ],
)
def test_admin_lists_filter_and_search(client, ada, alice, catalog, path):
    client.force_login(ada)
    response = client.get(path)
    assert response.status_code == 200


def test_anonymous_schema_fetches_are_rate_limited_but_signed_in_ones_are_not(client, alice):
    from rest_framework.settings import api_settings

    api_settings.DEFAULT_THROTTLE_RATES["anon-schema"] = "2/minute"
    try:
        anonymous = [client.get("/api/v1/schema/?format=json") for _ in range(3)]
        client.force_login(alice)
        signed_in = [client.get("/api/v1/schema/?format=json").status_code for _ in range(3)]
    finally:
        api_settings.DEFAULT_THROTTLE_RATES["anon-schema"] = "30/minute"
    assert [response.status_code for response in anonymous] == [200, 200, 429]
    assert anonymous[2].json()["code"] == "throttled"
    assert int(anonymous[2]["Retry-After"]) > 0
    assert signed_in == [200, 200, 200]
