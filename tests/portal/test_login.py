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


def test_anonymous_schema_is_refused_and_docs_send_people_to_login(client, db):
    assert client.get("/api/v1/schema/").status_code in (401, 403)
    response = client.get("/api/v1/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


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
