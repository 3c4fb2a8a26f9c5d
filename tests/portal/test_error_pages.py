"""The portal's own 404, 403 and 500 pages, the branded Django admin, and the API docs' way back."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.views.defaults import permission_denied

from audit.lib.context import current_request_id
from portal import urls
from portal.views.errors import server_error

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def assert_branded(html: str) -> None:
    assert "GPU Portal" in html
    assert "img/favicon.svg" in html
    assert "css/portal.css" in html


def test_a_missing_page_is_the_portals_404_with_a_way_back(alice):
    response = signed_in(alice).get("/no-such-page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert_branded(html)
    assert "Page not found" in html
    assert "/no-such-page/" in html
    assert 'href="/"' in html
    assert "Traceback" not in html


def test_a_refusal_is_the_portals_403(alice):
    request = RequestFactory().get("/somewhere/")
    request.user = alice
    response = permission_denied(request, PermissionDenied("Only admins may open this page."))
    html = response.content.decode()
    assert response.status_code == 403
    assert_branded(html)
    assert "Only admins may open this page." in html


def test_the_500_page_renders_without_the_request_and_names_its_request_id():
    assert urls.handler500 == "portal.views.errors.server_error"
    token = current_request_id.set("req-0123456789abcdef")
    try:
        response = server_error(RequestFactory().get("/"))
    finally:
        current_request_id.reset(token)
    html = response.content.decode()
    assert response.status_code == 500
    assert_branded(html)
    assert "Something went wrong" in html
    assert "req-0123456789abcdef" in html
    # No user and no navigation: the context processors never ran.
    assert "Sign out" not in html


def test_every_page_links_the_favicon_which_is_an_svg_in_static(alice):
    from django.contrib.staticfiles import finders

    html = signed_in(alice).get("/catalog/").content.decode()
    assert 'rel="icon"' in html and "img/favicon.svg" in html
    path = finders.find("img/favicon.svg")
    assert path is not None
    with open(path, encoding="utf-8") as svg:
        assert svg.read().lstrip().startswith("<svg")


def test_the_admin_names_itself_and_its_apps_in_plain_words(ada):
    response = signed_in(ada).get("/admin/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "GPU Portal administration" in html
    assert "Django administration" not in html
    assert "Back to the portal" in html
    for group in ("People and projects", "Catalog and hosts", "Costs and budgets", "Audit log"):
        assert group in html
    for name in ("Cost and Usage Report imports", "Daily cost totals", "Recorded calls"):
        assert name in html
    assert "Sign-in attempts" in html
    assert "Usages" not in html and "Cur imports" not in html


def test_the_api_docs_link_back_to_the_portal(alice):
    html = signed_in(alice).get("/api/v1/docs/").content.decode()
    assert "Back to the portal" in html
    assert 'href="/"' in html


def test_the_browsable_api_carries_the_portals_name_and_icon(ada):
    # Without its own icon link the browser asks /favicon.ico, a 404 in the console.
    client = Client()
    client.force_login(ada)
    html = client.get("/api/v1/", HTTP_ACCEPT="text/html").content.decode()
    assert 'rel="icon"' in html and "img/favicon" in html
    assert "GPU Portal API" in html
