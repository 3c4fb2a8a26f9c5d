"""Operations: the metrics middleware's cost per request, a /metrics scrape at 10,000 hosts."""

from __future__ import annotations

import statistics
import time

from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings

from tests.bench.bench_orders import make_instances, setup_people

TOKEN = "bench-metrics-token-0123456789"


def _p50(client: Client, path: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        client.get(path)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _middleware_cost(report) -> None:
    with_it = list(settings.MIDDLEWARE)
    without = [name for name in with_it if name != settings.METRICS_MIDDLEWARE]
    client = Client()
    path = "/login/"  # a page that touches no table: the middleware's share is at its largest
    runs, rounds = 200, 5
    on, off = [], []
    # Interleaved rounds, so that drift of the machine falls on both sides alike.
    for _ in range(rounds):
        with override_settings(MIDDLEWARE=without):
            off.append(_p50(client, path, runs))
        with override_settings(MIDDLEWARE=with_it):
            on.append(_p50(client, path, runs))
    p50_on, p50_off = statistics.median(on), statistics.median(off)
    report(f"GET {path} p50 without metrics middleware", f"{p50_off * 1000:.3f} ms")
    report(f"GET {path} p50 with metrics middleware", f"{p50_on * 1000:.3f} ms")
    report("ratio with / without", f"{p50_on / p50_off:.3f}", "goal <= 1.05")


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
