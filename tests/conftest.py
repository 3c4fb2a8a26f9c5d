"""Shared fixtures: the personas, the seeded catalog, API clients, and the service rules.

Personas (docs/design.md rule 15): alice and bob share vision-lab, carol is in nlp-lab, ada is
admin, fin is finance.

Tests that need PostgreSQL or Redis are marked; without those services they are skipped with a
reason that ``make test`` prints. With PORTAL_REQUIRE_SERVICES=1 (CI) such a skip is an error.

Every test runs at a fixed instant (tests/clock.py): ``clock`` freezes it, ``boundary_clock``
runs a test at each month and day boundary, ``--clock-at`` moves the instant every other test
starts at, and ``real_clock`` marks the tests that share the real clock with another process.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone
from pytest_django.plugin import blocking_manager_key
from rest_framework.test import APIClient

from portal.models import Membership, User
from portal.services import membership_set, project_upsert, user_upsert
from tests import clock, parallel

# Billing's timeline fixtures (hosts moved at chosen cloud times, then metered) serve the billing
# tests and the cost report's browser test.
pytest_plugins = ["tests.billing.timeline"]

PASSWORD = "correct-horse-battery-staple"
REQUIRE_SERVICES = os.environ.get("PORTAL_REQUIRE_SERVICES") == "1"


def _on_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def _on_redis() -> bool:
    return settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://"))


def pytest_addoption(parser):
    parser.addoption(
        "--clock-at",
        metavar="ISO",
        default=None,
        help="start every test that has not chosen its instant at this UTC instant instead of "
        f"{clock.DEFAULT:%Y-%m-%dT%H:%MZ} (e.g. 2026-11-30T23:30Z), to show it does not care "
        "what day it is run on",
    )


# Fixtures that bring in another process with a clock of its own, which time-machine cannot
# reach: a test using one runs on the real clock.
OTHER_CLOCKS = {"worker_process", "live_server", "portal_asgi"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        other_clock = OTHER_CLOCKS & set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("browser") or other_clock:
            item.add_marker(pytest.mark.real_clock)
    reasons = {
        "postgres": (_on_postgres(), "needs PostgreSQL: set DATABASE_URL=postgres://..."),
        "redis": (_on_redis(), "needs Redis: set CELERY_BROKER_URL=redis://..."),
    }
    for item in items:
        for marker, (available, reason) in reasons.items():
            # Under PORTAL_REQUIRE_SERVICES pytest_sessionstart has already refused to run
            # without both services, so nothing is ever skipped in CI.
            if marker in item.keywords and not available:
                item.add_marker(pytest.mark.skip(reason=reason))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = parallel.long_ones_first(items, workers, _is_long)


def _is_long(item) -> bool:
    """A test that runs for many seconds: a browser, a real worker, the fuzz, or a sweep that
    is one test (the parametrized sweeps are many short ones)."""
    if item.get_closest_marker("real_clock") or item.get_closest_marker("fuzz"):
        return True
    return bool(item.get_closest_marker("sweep")) and not hasattr(item, "callspec")


def pytest_configure(config):
    given = config.getoption("--clock-at")
    if given:
        try:
            clock.parse_instant(given)
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None


def pytest_sessionstart(session):
    if REQUIRE_SERVICES and not (_on_postgres() and _on_redis()):
        raise pytest.UsageError(
            "PORTAL_REQUIRE_SERVICES=1 but DATABASE_URL/CELERY_BROKER_URL do not point at "
            "PostgreSQL and Redis; CI must not skip the tests that need them."
        )


def _default_instant(config) -> tuple[str, datetime]:
    given = config.getoption("--clock-at")
    return ("clock-at", clock.parse_instant(given)) if given else ("default", clock.DEFAULT)


@pytest.fixture(autouse=True)
def _test_clock(request):
    """The clock every test runs on, set up before any other fixture of the test writes a row.

    By default it starts at the default instant and ticks; ``clock`` freezes it there,
    ``boundary_clock`` freezes it at each of tests/clock.py's INSTANTS in turn, and a
    ``real_clock`` test is left on the wall clock.
    """
    if request.node.get_closest_marker("real_clock"):
        yield clock.Clock(name="real", start=timezone.now(), frozen=False)
        return
    callspec = getattr(request.node, "callspec", None)
    boundary = callspec.params.get("boundary_clock") if callspec else None
    if boundary is not None:
        name, start = boundary, clock.INSTANTS[boundary]
    else:
        name, start = _default_instant(request.config)
    frozen = boundary is not None or "clock" in request.fixturenames
    with time_machine.travel(start, tick=not frozen) as traveller:
        yield clock.Clock(name=name, start=start, frozen=frozen, _traveller=traveller)


@pytest.fixture(name="clock")
def frozen_clock(_test_clock) -> clock.Clock:
    """The clock frozen at the default instant (or ``--clock-at``), for a test that reads the
    calendar; ``clock.shift(timedelta(...))`` moves it on."""
    return _test_clock


@pytest.fixture(params=list(clock.INSTANTS))
def boundary_clock(_test_clock) -> clock.Clock:
    """The clock frozen at each of tests/clock.py's INSTANTS in turn: mid-month, 23:30 on the
    last day of a month, 00:05 on the first, and 29 February. For the suites most exposed to
    month and day boundaries; ``boundary_clock.name`` says which."""
    return _test_clock


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """The personas' passwords are hashed with a fast hasher: Django's default takes half a
    second per password here, and most tests make two to five personas."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _own_audit_witness(settings, tmp_path_factory):
    """Each test publishes its checkpoints to a witness file of its own: a witness left by an
    earlier test's database would accuse this one's of a deleted tail."""
    name = f"audit-witness-{uuid.uuid4().hex}.jsonl"
    settings.PORTAL_AUDIT_WITNESS_PATH = str(tmp_path_factory.getbasetemp() / name)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with an empty cache: throttle counters (keyed on the test client's one
    address) must not leak from one test into the next."""
    from django.core.cache import caches

    for cache in caches.all():
        cache.clear()


# The catalog (the simulated cloud's types and the TensorFlow images, as `make run` has them)
# is in every test database from the start: loaded once when the database is made, and again
# after each test that empties it (a transactional test truncates every table), never once per
# test (0.16 s a test, and 1,769 tests use it). It is loaded at an instant before any test's
# clock, so its list prices hold at whatever instant a test runs.
CATALOG_AT = datetime(2000, 1, 3, tzinfo=UTC)
_catalog_loaded: list[bool] = []


def _load_catalog() -> None:
    from instances.services import catalog_sync

    with time_machine.travel(CATALOG_AT, tick=False):
        catalog_sync(
            provider=settings.PORTAL_PROVIDER,
            price_file=Path(settings.PORTAL_PRICE_FILE),
            image_file=Path(settings.PORTAL_IMAGE_FILE),
        )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        _load_catalog()
    _catalog_loaded.append(True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    # After the last test the test database is gone already: nothing to load it into.
    if _catalog_loaded and nextitem is not None:
        from instances.models import InstanceType

        with item.config.stash[blocking_manager_key].unblock():
            if not InstanceType.objects.exists():
                _load_catalog()
    return result


@pytest.fixture
def empty_catalog(db):
    """No instance types and no images, for the tests of loading them (the deletion is rolled
    back with the test)."""
    from instances.models import Image, InstanceType

    InstanceType.objects.all().delete()
    Image.objects.all().delete()


@pytest.fixture
def catalog(db):
    """The catalog's instance types by name (the catalog itself is always there)."""
    from instances.models import InstanceType

    return {row.name: row for row in InstanceType.objects.all()}


def _person(username: str, role: str) -> User:
    user, _ = user_upsert(
        username=username,
        role=role,
        email=f"{username}@example.org",
        first_name=username.capitalize(),
        password=PASSWORD,
    )
    return user


@pytest.fixture
def projects(db):
    vision, _ = project_upsert(slug="vision-lab", name="Vision Lab")
    nlp, _ = project_upsert(slug="nlp-lab", name="NLP Lab")
    return {"vision-lab": vision, "nlp-lab": nlp}


@pytest.fixture
def alice(projects):
    user = _person("alice", User.Role.RESEARCHER)
    membership_set(project=projects["vision-lab"], user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def bob(projects):
    user = _person("bob", User.Role.RESEARCHER)
    membership_set(project=projects["vision-lab"], user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def carol(projects):
    user = _person("carol", User.Role.RESEARCHER)
    membership_set(project=projects["nlp-lab"], user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def ada(db):
    return _person("ada", User.Role.ADMIN)


@pytest.fixture
def fin(db):
    return _person("fin", User.Role.FINANCE)


@pytest.fixture
def api():
    """An API client; `api.force_authenticate(user)` or `api.login(...)` to sign in."""
    return APIClient()


@pytest.fixture
def api_as(api):
    def sign_in(user: User) -> APIClient:
        api.force_authenticate(user)
        return api

    return sign_in


ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop"
)


@pytest.fixture(autouse=True)
def _instant_cloud(settings):
    """The simulated cloud boots hosts at once in tests (docs/design.md rule 15: zero boot delay
    in tests)."""
    settings.PORTAL_SIMULATED_BOOT_SECONDS = 0
    settings.PORTAL_SIMULATED_API_LATENCY_SECONDS = 0


@pytest.fixture(autouse=True)
def _slice_logins_end():
    """The SSH servers a test's MIG slices started (instances/providers/simulated_logins.py)
    end with the test: its database, and so its hosts, are gone after it."""
    yield
    from instances.providers.simulated_logins import _LOGINS

    while _LOGINS:
        _, logins = _LOGINS.popitem()
        for folder in (logins.root / "slices").glob("*"):
            logins.end(folder.name)


@pytest.fixture
def order_body():
    """A valid order for one g5.xlarge in vision-lab, as the API takes it."""

    def body(**overrides):
        data = {
            "project": "vision-lab",
            "instance_type": "g5.xlarge",
            "image": "tf-2.17-cuda12.3",
            "market": "on_demand",
            "count": 1,
            "lease_hours": 8,
            "ssh_public_key": ED25519,
        }
        data.update(overrides)
        return {key: value for key, value in data.items() if value is not None}

    return body


@pytest.fixture
def place_order(catalog, projects):
    """Place an order through the service, as a view would."""
    from instances import services
    from instances.models import Image

    def place(user, **overrides):
        fields = {
            "requester": user,
            "project": projects["vision-lab"],
            "instance_type": catalog["g5.xlarge"],
            "image": Image.objects.get(name="tf-2.17-cuda12.3"),
            "market": "on_demand",
            "count": 1,
            "lease_hours": 8,
            "ssh_public_key": ED25519,
        }
        fields.update(overrides)
        order, _ = services.order_submit(**fields)
        return order

    return place


@pytest.fixture
def running_host(place_order, alice):
    """One of alice's g5.xlarge hosts, provisioned on the simulated cloud and running."""
    from instances import services

    def make(user=None, **overrides):
        order = place_order(user or alice, **overrides)
        instance = order.instances.get()
        return services.instance_provision(instance_id=instance.pk)

    return make


@pytest.fixture
def portal_asgi():
    """The portal under uvicorn (ASGI, as make run and production serve it: websockets too) on
    a free loopback port, on the test database: host:port. Use with transactional tests."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config("portal.asgi:application", host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def worker_process():
    """Start a real Celery worker process on the test database; stopped after the test."""
    from tests.workers import Worker, purge_queues

    started = []

    def start(**env: str):
        purge_queues()
        process = Worker(**env).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
