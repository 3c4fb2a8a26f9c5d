"""Operations: the metrics middleware's cost per request, a /metrics scrape at 10,000 hosts."""

from __future__ import annotations

import random
import statistics
import time

from django.conf import settings
from django.db import connection
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import resolve

from portal.metrics import PROCESS_WRITES_FILES
from portal.middleware import MetricsMiddleware
from tests.bench.bench_orders import make_instances, setup_people

TOKEN = "bench-metrics-token-0123456789"


def _client(middleware: list[str], path: str) -> Client:
    """A client whose handler built its middleware chain from ``middleware``: Django builds a
    handler's chain at its first request and keeps it, whatever the settings say later."""
    client = Client()
    with override_settings(MIDDLEWARE=middleware):
        client.get(path)
    return client


def _middleware_cost(report) -> None:
    with_it = list(settings.MIDDLEWARE)
    without = [name for name in with_it if name != settings.METRICS_MIDDLEWARE]
    path = "/login/"  # a page that touches no table: the middleware's share is at its largest
    clients = {"off": _client(without, path), "on": _client(with_it, path)}
    samples: dict[str, list[float]] = {"off": [], "on": []}
    # Requests alternate one by one, in a shuffled order, so that drift of a shared machine and
    # whichever side goes first fall on both alike.
    order = random.Random(14)
    for _ in range(2000):
        sides = ["off", "on"]
        order.shuffle(sides)
        for side in sides:
            started = time.perf_counter()
            clients[side].get(path)
            samples[side].append(time.perf_counter() - started)
    p50_on, p50_off = statistics.median(samples["on"]), statistics.median(samples["off"])
    report(f"GET {path} p50 without metrics middleware", f"{p50_off * 1000:.3f} ms")
    report(f"GET {path} p50 with metrics middleware", f"{p50_on * 1000:.3f} ms")
    report("ratio with / without", f"{p50_on / p50_off:.3f}", "goal <= 1.05")
    report("metrics middleware alone, per request", f"{_alone() * 1e6:.1f} us", "median")
    mode = "multiprocess files" if PROCESS_WRITES_FILES else "in memory"
    report("counters kept", mode, "PROMETHEUS_MULTIPROC_DIR")


def _alone() -> float:
    """The middleware's own time around a view that does nothing (a routed request)."""
    request = RequestFactory().get("/api/v1/instances/")
    request.resolver_match = resolve("/api/v1/instances/")
    answer = HttpResponse("ok")
    middleware = MetricsMiddleware(lambda request: answer)
    samples = []
    for _ in range(20_000):
        started = time.perf_counter()
        middleware(request)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _scrape(report, hosts: int) -> None:
    user, project = setup_people()
    make_instances(user, project, hosts)
    client = Client()
    with override_settings(PORTAL_METRICS_TOKEN=TOKEN):
        client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")  # warm
        times = []
        for _ in range(5):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
                times.append(time.perf_counter() - started)
    assert response.status_code == 200
    report(
        f"/metrics scrape at {hosts:,} hosts, median of 5",
        f"{statistics.median(times) * 1000:.1f} ms",
    )
    report(f"/metrics scrape at {hosts:,} hosts, SQL queries", str(len(queries)), "fixed")


def run(report) -> None:
    _middleware_cost(report)
    _scrape(report, 100)
    _scrape(report, 10_000)
