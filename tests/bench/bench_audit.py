"""What the audit log costs: list latency with audit on vs off, SQL per request, verify time."""

from __future__ import annotations

import statistics
import time
import warnings

# The endpoint whose latency is compared: a page of 50 of a project's 200 hosts.
LIST = "/api/v1/instances/"
ROUNDS = 1000
VERIFY_ROWS = 100_000


def run(report) -> None:
    from django.conf import settings

    # Measured as production runs: with DEBUG on, Django logs every query and its SQLite
    # backend even runs an extra SELECT to quote the parameters of each logged one.
    debug = settings.DEBUG
    settings.DEBUG = False
    try:
        with warnings.catch_warnings():
            # whitenoise notes the missing STATIC_ROOT; the bench serves no static files.
            warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
            _run(report)
    finally:
        settings.DEBUG = debug


def _run(report) -> None:
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from tests.bench.bench_orders import make_instances, setup_people

    user, project = setup_people()
    make_instances(user, project, 200)
    client = Client()
    client.force_login(user)

    def timed(enabled: bool) -> float:
        settings.PORTAL_AUDIT_ENABLED = enabled  # read by the middleware on every request
        started = time.perf_counter()
        response = client.get(LIST)
        took = time.perf_counter() - started
        assert response.status_code == 200, response.status_code
        return took

    for _ in range(50):  # warm caches, connections, the resolver
        timed(True)
        timed(False)
    on: list[float] = []
    off: list[float] = []
    for index in range(ROUNDS):
        # Interleaved, alternating which goes first, so drift hits both sides alike.
        order = (True, False) if index % 2 == 0 else (False, True)
        for enabled in order:
            (on if enabled else off).append(timed(enabled))
    p50_on, p50_off = statistics.median(on), statistics.median(off)
    report(f"p50 GET {LIST} audit on", f"{p50_on * 1000:.2f} ms", f"{ROUNDS} calls")
    report(f"p50 GET {LIST} audit off", f"{p50_off * 1000:.2f} ms", f"{ROUNDS} calls")
    report("latency ratio on/off (p50)", f"{p50_on / p50_off:.3f}", "goal ≤ 1.05")

    def statements(enabled: bool) -> int:
        settings.PORTAL_AUDIT_ENABLED = enabled
        with CaptureQueriesContext(connection) as captured:
            client.get(LIST)
        return len(captured.captured_queries)

    added = statements(True) - statements(False)
    report("SQL statements audit adds per request", str(added), "goal 1 (one INSERT)")
    report(
        "  ... per unsafe request (an admin adds a group)",
        str(_unsafe_statements()),
        "the INSERT + SAVEPOINT/RELEASE for the admin's own atomic",
    )
    settings.PORTAL_AUDIT_ENABLED = True

    seconds, sealed = _verify_time(VERIFY_ROWS)
    report(f"seal {VERIFY_ROWS:,} rows", f"{sealed:.2f} s")
    report(f"audit_verify over {VERIFY_ROWS:,} rows", f"{seconds:.2f} s", "goal < 10 s")


def _unsafe_statements() -> int:
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from portal.models import User
    from portal.services import user_upsert

    admin, _ = user_upsert(username="bench-admin", role=User.Role.ADMIN, password="bench-pass-1")
    client = Client()
    client.force_login(admin)
    counts = {}
    for index, enabled in enumerate((True, False, True, False)):
        settings.PORTAL_AUDIT_ENABLED = enabled
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/admin/auth/group/add/", {"name": f"bench-{index}"})
        assert response.status_code == 302, response.status_code
        counts[enabled] = len(captured.captured_queries)
    return counts[True] - counts[False]


def _verify_time(count: int) -> tuple[float, float]:
    from datetime import timedelta
    from io import StringIO

    from django.core.management import call_command
    from django.utils import timezone

    from audit.models import AuditEvent
    from audit.services import audit_chain_seal

    start = timezone.now() - timedelta(seconds=count / 1000)
    rows = [
        AuditEvent(
            time=start + timedelta(milliseconds=index),
            request_id=f"{index:032x}",
            actor_id=7,
            actor_username="alice",
            actor_role="researcher",
            auth_method="session",
            source_ip="10.0.0.7",
            user_agent="python-requests/2.32",
            method="GET" if index % 5 else "POST",
            route="api/v1/instance-types/$",
            view_name="instance-type-list",
            path="/api/v1/instance-types/",
            query="gpu_model=H100" if index % 3 == 0 else "",
            status=200 if index % 7 else 403,
            outcome="success" if index % 7 else "denied",
            duration_us=1000 + index % 900,
            app_version="0.1.0",
        )
        for index in range(count)
    ]
    AuditEvent.objects.bulk_create(rows, batch_size=5000)
    started = time.perf_counter()
    audit_chain_seal()
    sealed = time.perf_counter() - started
    out = StringIO()
    started = time.perf_counter()
    call_command("audit_verify", stdout=out)
    seconds = time.perf_counter() - started
    assert out.getvalue().startswith("audit chain OK"), out.getvalue()
    return seconds, sealed
