"""Every route, every method, every kind of caller: exactly one audit row per audited call.

The routes come from the URL resolver at collection time, so a route added tomorrow is tested
tomorrow without touching this file. For each route and each method the test makes five calls:
a plausible one as an admin, one without signing in, one as a researcher of another project,
one with broken input, and one forced to fail with a 500 after its view ran. Each response must
carry an X-Request-ID, and the audit log must hold exactly one row with that id (API calls,
admin and audit pages, unsafe page requests) or none (a safe request to an ordinary page),
with the status the caller got.
"""

from __future__ import annotations

import itertools
import re
import uuid
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.contrib.admin.utils import quote
from django.contrib.auth import SESSION_KEY
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.backends.db import SessionStore
from django.db import DatabaseError, transaction
from django.test import Client, RequestFactory
from django.test.client import ClientHandler
from django.urls import URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404

from audit.lib.scope import is_audited
from audit.models import AuditEvent

# Every route, every caller: the suite runs it; make test-fast leaves it out (docs/testing.md).
pytestmark = pytest.mark.sweep

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
CALLERS = ["valid", "anonymous", "stranger", "invalid", "fault"]
GENERIC_SAMPLES = ["1", "portal", "x", "json", "00000000-0000-4000-8000-000000000000"]


@dataclass(frozen=True)
class Route:
    route: str  # the concatenated pattern, as ResolverMatch.route spells it
    parts: tuple
    callback: object

    def __str__(self) -> str:
        return self.route


def _join(route: str, part) -> str:
    # ResolverMatch.route joins nested patterns this way (URLResolver._join_route).
    text = str(part)
    return route + text.removeprefix("^") if route else text


def _walk(patterns, parts=(), route=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(
                pattern.url_patterns, (*parts, pattern.pattern), _join(route, pattern.pattern)
            )
        else:
            yield Route(_join(route, pattern.pattern), (*parts, pattern.pattern), pattern.callback)


def all_routes() -> list[Route]:
    seen: dict[str, Route] = {}
    for route in _walk(get_resolver().url_patterns):
        seen.setdefault(route.route, route)
    return list(seen.values())


def pytest_generate_tests(metafunc):
    if "route" in metafunc.fixturenames:
        routes = all_routes()
        metafunc.parametrize("route", routes, ids=[route.route or "<root>" for route in routes])


# --- turning a route pattern into a path that resolves back to it ---------------------------

_CONVERTER = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")


def _kwarg_names(route: Route) -> list[str]:
    names = []
    for part in route.parts:
        names += list(part.regex.groupindex)
    return names


def _specific_sample(route: Route, name: str) -> str | None:
    """A value naming a real object, where the view says which model it serves."""
    callback = route.callback
    model = None
    view_class = getattr(callback, "cls", None)
    if view_class is not None:
        queryset = getattr(view_class, "queryset", None)
        serializer = getattr(view_class, "serializer_class", None)
        model = queryset.model if queryset is not None else None
        if model is None and serializer is not None and hasattr(serializer, "Meta"):
            model = getattr(serializer.Meta, "model", None)
        lookup = getattr(view_class, "lookup_url_kwarg", None) or getattr(
            view_class, "lookup_field", "pk"
        )
        if model is not None and name == lookup:
            row = model._default_manager.order_by("pk").first()
            lookup_field = getattr(view_class, "lookup_field", "pk")
            return str(getattr(row, lookup_field)) if row is not None else None
    admin = getattr(callback, "model_admin", None) or getattr(
        getattr(callback, "__wrapped__", None), "__self__", None
    )
    if getattr(admin, "model", None) is not None and name in ("object_id", "id"):
        row = admin.model._default_manager.order_by("pk").first()
        return quote(str(row.pk)) if row is not None else None
    if name == "content_type_id":
        return str(ContentType.objects.order_by("pk").values_list("pk", flat=True).first())
    if name == "format":
        return "json" if route.parts[-1].__class__.__name__ == "RegexPattern" else ".json"
    if name == "app_label":
        return "portal"
    return None


def _replace_groups(regex: str, values: dict[str, str]) -> str:
    out, index = [], 0
    while index < len(regex):
        if regex.startswith("(?P<", index):
            name = regex[index + 4 : regex.index(">", index)]
            depth, cursor = 0, index
            while True:
                char = regex[cursor]
                if char == "\\":
                    cursor += 2
                    continue
                depth += char == "("
                depth -= char == ")"
                cursor += 1
                if depth == 0:
                    break
            out.append(values[name])
            index = cursor
        else:
            out.append(regex[index])
            index += 1
    text = "".join(out)
    text = text.removeprefix("^").removesuffix("$").removesuffix("\\Z").replace("/?", "/")
    return text.replace("\\.", ".").replace("\\-", "-")


def _build(route: Route, values: dict[str, str]) -> str:
    path = ""
    for part in route.parts:
        text = str(part)
        if part.__class__.__name__ == "RegexPattern":
            path += _replace_groups(text, values)
        else:
            path += _CONVERTER.sub(lambda match: values[match.group("name")], text)
    return "/" + path


def _sample_or_none(route: Route, name: str) -> str | None:
    # In a savepoint: a model whose table is behind its migration must not take the test's
    # transaction down with it; the generic samples still reach the route.
    try:
        with transaction.atomic():
            return _specific_sample(route, name)
    except DatabaseError:
        return None


def concrete_path(route: Route) -> str:
    names = _kwarg_names(route)
    choices = []
    for name in names:
        specific = _sample_or_none(route, name)
        choices.append(([specific] if specific else []) + GENERIC_SAMPLES)
    fallback = None
    for combination in itertools.product(*choices):
        path = _build(route, dict(zip(names, combination, strict=True)))
        try:
            if resolve(path).route == route.route:
                return path
        except Resolver404:
            continue
        fallback = fallback or path
    if fallback is None:
        pytest.fail(f"no sample path resolves to {route.route}; teach _specific_sample its kwargs")
    # An earlier pattern shadows this one for every sample (DRF's format suffix after a lookup
    # that allows dots): the route cannot be reached, and its calls go to the earlier view,
    # which must audit them all the same.
    return fallback


# --- the calls ---------------------------------------------------------------------------


def _call(client: Client, method: str, path: str, caller: str):
    api = path.startswith("/api/")
    headers = {"HTTP_USER_AGENT": f"route-walker/{caller}"}
    if caller == "fault":
        headers["HTTP_X_PORTAL_FAULT"] = "after-view"
    if method == "GET":
        query = (
            "?page=0&ordering=%25%25&since=not-a-date&page_size=-1" if caller == "invalid" else ""
        )
        return client.get(path + query, **headers)
    if caller == "invalid":
        body, content_type = (
            ('{"broken": ', "application/json")
            if api
            else ("%%%=\x1b[31m", "application/x-www-form-urlencoded")
        )
    else:
        body, content_type = (
            ("{}", "application/json") if api else ("", "application/x-www-form-urlencoded")
        )
    return client.generic(method, path, body, content_type=content_type, **headers)


def test_every_call_to_the_route_leaves_exactly_one_audit_row(
    route, catalog, ada, carol, alice, faults
):
    path = concrete_path(route)
    # One handler for all calls: building the middleware chain (WhiteNoise indexes every
    # static file) costs more than the calls themselves.
    handler = ClientHandler(enforce_csrf_checks=False)
    # Signed in once each, outside the calls' savepoints: a call that signs out or in changes
    # nothing the next call sees, its session rows go with its rollback.
    sessions = {"ada": _signed_in(ada), "carol": _signed_in(carol)}
    problems = []
    for method, caller in itertools.product(METHODS, CALLERS):
        # Each call in a savepoint that is rolled back afterwards: an admin "delete" that a
        # call confirms must not take the personas away from the calls after it.
        with transaction.atomic():
            problems += _check_one_call(handler, method, path, caller, sessions)
            transaction.set_rollback(True)
    assert not problems, "\n".join(problems)


def _signed_in(user) -> str:
    client = Client()
    client.force_login(user)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert SessionStore(key).get(SESSION_KEY) == str(user.pk)
    return key


# Who makes each kind of call (the anonymous one: nobody).
persona = {"valid": "ada", "invalid": "ada", "fault": "ada", "stranger": "carol"}


def _check_one_call(handler, method, path, caller, sessions) -> list[str]:
    client = Client(raise_request_exception=False)
    client.handler = handler
    if caller in persona:
        client.cookies[settings.SESSION_COOKIE_NAME] = sessions[persona[caller]]
    before = AuditEvent.objects.count()
    response = _call(client, method, path, caller)
    label = f"{method} {path} ({caller}) → {response.status_code}"
    request_id = response.get("X-Request-ID")
    if not request_id:
        return [f"{label}: no X-Request-ID header"]
    expected = 1 if _audited(method, path) else 0
    rows = list(AuditEvent.objects.filter(request_id=request_id))
    written = AuditEvent.objects.count() - before
    if len(rows) != expected or written != expected:
        return [f"{label}: {len(rows)} rows with its id, {written} new rows"]
    problems = []
    if caller == "fault" and response.status_code != 500:
        problems.append(f"{label}: the fault switch did not force a 500")
    if rows:
        row = rows[0]
        if (row.status, row.method, row.path) != (response.status_code, method, path):
            problems.append(f"{label}: row says {row.status} {row.method} {row.path}")
        if response.status_code >= 500 and row.outcome != "error":
            problems.append(f"{label}: outcome {row.outcome}")
        if 400 <= response.status_code < 500 and row.outcome != "denied":
            problems.append(f"{label}: outcome {row.outcome}")
    return problems


def _audited(method: str, path: str) -> bool:
    return is_audited(RequestFactory().generic(method, path))


def test_the_walk_covers_the_api_the_admin_and_the_pages():
    routes = {route.route for route in all_routes()}
    assert any(route.startswith("api/v1/") for route in routes)
    assert any(route.startswith("admin/") for route in routes)
    assert "audit/" in routes and "activity/" in routes and "login/" in routes
    assert any("audit/events" in route for route in routes)


def test_a_sample_path_resolves_back_to_its_route(catalog):
    route = next(r for r in all_routes() if r.route == "api/v1/instance-types/(?P<name>[^/]+)/$")
    path = concrete_path(route)
    assert resolve(path).route == route.route
    assert path.startswith("/api/v1/instance-types/")
    assert str(uuid.UUID(int=0)) not in path
