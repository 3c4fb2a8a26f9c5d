"""Every unsafe route, sent every kind of broken body: never a 500, always exactly one row.

The routes come from the URL resolver (as in test_every_route_is_audited), so a route added
tomorrow is walked tomorrow. API routes get broken JSON by POST, PUT, PATCH and DELETE; pages
(and the admin) get broken forms by POST, with every field any of the portal's forms reads.
JSON nested deeper than ``json.loads`` can recurse used to answer 500 and leave no row.
"""

from __future__ import annotations

import itertools

import pytest
from django import forms
from django.conf import settings
from django.db import transaction
from django.test import Client
from django.test.client import ClientHandler

from audit.models import AuditEvent
from tests.audit.test_every_route_is_audited import all_routes, concrete_path

# Every route, every caller: the suite runs it; make test-fast leaves it out (docs/testing.md).
pytestmark = pytest.mark.sweep

NESTED = "[" * 5000 + "]" * 5000


def _form_fields() -> list[str]:
    """Every field name a form of the portal (or Django's sign-in) reads."""

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    names = {"username", "password", "name", "days", "revoke", "reason", "decision"}
    for form in subclasses(forms.BaseForm):
        if form.__module__.split(".")[0] in {"portal", "instances", "billing", "audit"}:
            names |= set(getattr(form, "base_fields", {}))
    return sorted(names)


def _form(value: bytes) -> bytes:
    return b"&".join(name.encode() + b"=" + value for name in _form_fields())


BOUNDARY = "----portal-test"

JSON_BODIES = {
    "nested": (NESTED.encode(), "application/json"),
    "nested in a field": (b'{"name": ' + NESTED.encode() + b"}", "application/json"),
    "invalid UTF-8": (b'{"name": "\xff\xfe\xfd"}', "application/json"),
    "NUL bytes": (b'{"name": "a\x00b"}\x00\x00', "application/json"),
    "cut short": (b'{"name": "x', "application/json"),
    "wrong content type": (b"<order><count>1</count></order>", "application/xml"),
}
FORM_BODIES = {
    "nested JSON in every field": (
        lambda: _form(NESTED.encode()),
        "application/x-www-form-urlencoded",
    ),
    "invalid UTF-8": (lambda: _form(b"\xff\xfe%FF"), "application/x-www-form-urlencoded"),
    "NUL bytes": (lambda: _form(b"a\x00b"), "application/x-www-form-urlencoded"),
    "cut short": (lambda: _form(b"%E2%8"), "application/x-www-form-urlencoded"),
    "cut-short multipart": (
        lambda: f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\nx'.encode(),
        f"multipart/form-data; boundary={BOUNDARY}",
    ),
    "wrong content type": (lambda: NESTED.encode(), "application/json"),
}


# 500s this walk finds whose fixes lie outside the audit log and the body parsers, by (route,
# kind of body), with who fixes each. Every such call must still leave its one row; and once one
# of them answers below 500 its entry must go, so that the list never hides a regression. None
# is known.
KNOWN_SERVER_ERRORS: dict[tuple[str, str], str] = {}


def _unsafe_routes():
    return [route for route in all_routes() if route.route]


def pytest_generate_tests(metafunc):
    if "unsafe_route" in metafunc.fixturenames:
        routes = _unsafe_routes()
        metafunc.parametrize("unsafe_route", routes, ids=[route.route for route in routes])


def _calls(path: str):
    if path.startswith("/api/"):
        for method, (kind, (body, content_type)) in itertools.product(
            ["POST", "PUT", "PATCH", "DELETE"], JSON_BODIES.items()
        ):
            yield method, kind, body, content_type
    else:
        for kind, (body, content_type) in FORM_BODIES.items():
            yield "POST", kind, body(), content_type


def test_a_broken_body_never_answers_500_and_leaves_exactly_one_row(
    unsafe_route, catalog, ada, alice, carol, faults
):
    path = concrete_path(unsafe_route)
    handler = ClientHandler(enforce_csrf_checks=False)
    problems = []
    known = {kind for route, kind in KNOWN_SERVER_ERRORS if route == unsafe_route.route}
    failing = set()
    client = Client(raise_request_exception=False)
    client.handler = handler
    client.force_login(ada)
    for method, kind, body, content_type in _calls(path):
        # Rolled back after each call, so that nothing a call changed meets the next one.
        with transaction.atomic():
            before = AuditEvent.objects.count()
            response = client.generic(method, path, body, content_type=content_type)
            label = f"{method} {path} ({kind}) → {response.status_code}"
            rows = list(AuditEvent.objects.filter(request_id=response["X-Request-ID"]))
            if response.status_code >= 500:
                failing.add(kind)
                if kind not in known:
                    problems.append(f"{label}: server error")
            if len(rows) != 1 or AuditEvent.objects.count() - before != 1:
                problems.append(f"{label}: {len(rows)} rows")
            elif rows[0].status != response.status_code:
                problems.append(f"{label}: row says {rows[0].status}")
            transaction.set_rollback(True)
        if settings.SESSION_COOKIE_NAME in response.cookies:
            # The call signed in or out: its session went with the rollback.
            client.force_login(ada)
    problems += [
        f"{path} ({kind}) no longer answers 500: remove it from KNOWN_SERVER_ERRORS"
        for kind in known - failing
    ]
    assert not problems, "\n".join(problems)


def test_the_walk_covers_api_pages_and_admin_with_every_kind_of_body():
    routes = {route.route for route in _unsafe_routes()}
    assert any(route.startswith("api/v1/") for route in routes)
    assert any(route.startswith("admin/") for route in routes)
    assert "login/" in routes
    fields = _form_fields()
    assert {"username", "password", "allowed_markets", "max_gpus_by_model"} <= set(fields)


@pytest.mark.parametrize(("kind", "expected"), [("nested", 400), ("wrong content type", 415)])
def test_the_api_answers_a_broken_body_in_its_error_shape(web, ada, kind, expected):
    body, content_type = JSON_BODIES[kind]
    response = web(ada).post("/api/v1/orders/", body, content_type=content_type)
    assert response.status_code == expected
    assert set(response.json()) == {"code", "detail"}
