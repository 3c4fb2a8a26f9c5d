"""Part of the orders bench: GET /api/v1/instances/ on the seeded demo, its p50 and the
spot-price rows it reads, as it reads them now beside the reading it replaced (one span per
type and region, ``at`` in the zones' DISTINCT)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from functools import reduce
from operator import or_

import time_machine
from django.core.management import call_command
from django.db import connection, reset_queries
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import billing.services.metering
from billing.lib.money import micros
from billing.models import SpotPrice
from billing.services.prices import RateHistories
from instances.models import Instance, Market, Order
from portal.models import User

RUNS = 15


class ReadAsBefore(RateHistories):
    """The spot reads as they were before issue 22: one span per (type, region) from the
    earliest host's start to the latest one's end, and the zones' DISTINCT over the model's
    ordering (``at`` included)."""

    def __init__(self, windows) -> None:
        windows = list(windows)
        super().__init__([])  # the empty histories, filled below
        types = {host.instance_type_id for host, _, _ in windows}
        if types:
            rows = billing.services.prices.ListPrice.objects.filter(instance_type_id__in=types)
            for type_id, at, price in rows.order_by("at").values_list(
                "instance_type_id", "at", "price_per_hour"
            ):
                self._list[type_id].append((at, micros(price)))
        spans: dict = {}
        for host, start, end in windows:
            if host.market == Market.SPOT:
                key = (host.instance_type_id, host.region)
                low, high = spans.get(key, (start, end))
                spans[key] = (min(low, start), max(high, end))
        if not spans:
            return
        columns = ("instance_type_id", "region", "availability_zone")
        pairs = [Q(instance_type_id=t, region=r) for t, r in spans]
        observed = SpotPrice.objects.filter(reduce(or_, pairs))
        for type_id, region, zone in observed.values_list(*columns).distinct():
            self._zones[(type_id, region)].add(zone)
        opening = SpotPrice.objects.filter(
            reduce(
                or_,
                (Q(instance_type_id=t, region=r, at__lte=lo) for (t, r), (lo, _) in spans.items()),
            )
        ).annotate(
            newest=Window(
                RowNumber(), partition_by=[F(c) for c in columns], order_by=F("at").desc()
            )
        )
        inside = SpotPrice.objects.filter(
            reduce(
                or_,
                (
                    Q(instance_type_id=t, region=r, at__gt=lo, at__lt=hi)
                    for (t, r), (lo, hi) in spans.items()
                ),
            )
        )
        found = [
            *opening.filter(newest=1).values_list(*columns, "at", "price_per_hour"),
            *inside.values_list(*columns, "at", "price_per_hour"),
        ]
        self._spot = defaultdict(list)
        for type_id, region, zone, at, price in sorted(found, key=lambda row: row[3]):
            self._spot[(type_id, region, zone)].append((at, micros(price)))


@contextmanager
def reading(histories):
    saved = billing.services.metering.RateHistories
    billing.services.metering.RateHistories = histories
    try:
        yield
    finally:
        billing.services.metering.RateHistories = saved


def _rows_read(captured) -> int:
    """Rows the spot-price queries of one request returned (each counted again by the
    database: SELECT COUNT(*) over the query as it ran)."""
    table = SpotPrice._meta.db_table
    total = 0
    with connection.cursor() as cursor:
        for query in captured:
            sql = query["sql"]
            if table in sql and sql.lstrip().upper().startswith("SELECT"):
                # The bench's own captured SQL, not input: counted as it ran.
                cursor.execute(f"SELECT COUNT(*) FROM ({sql}) AS counted")  # noqa: S608
                total += cursor.fetchone()[0]
    return total


def _page(client: Client, url: str) -> tuple[float, int, dict]:
    # The query log keeps the last 9,000 queries: past them (the seeding ran many more) a
    # capture would see none.
    reset_queries()
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.get(url)
        took = time.perf_counter() - started
    assert response.status_code == 200, response.content[:300]
    costs = {row["id"]: row["cost_so_far"] for row in response.json()["results"]}
    return took, _rows_read(captured.captured_queries), costs


def run(report) -> None:
    # The orders bench's own hosts and orders would join the demo's in ada's list.
    Instance.objects.all().delete()
    Order.objects.all().delete()

    out = open("/dev/null", "w")  # noqa: SIM115
    started = time.perf_counter()
    call_command("seed_demo", stdout=out, stderr=out)
    hosts = Instance.objects.count()
    report(
        "seeded demo (seed_demo, 60 days of history)",
        f"{hosts} hosts",
        f"{SpotPrice.objects.count():,} spot prices; {time.perf_counter() - started:.0f} s",
    )
    client = Client()
    client.force_login(User.objects.get(username="ada"))
    url = "/api/v1/instances/?page_size=50"
    pages = -(-hosts // 50)
    figures = {}
    # One frozen moment for both readings: running hosts' costs so far are then comparable.
    frozen = time_machine.travel(timezone.now(), tick=False)
    frozen.start()
    for name, histories in (("before", ReadAsBefore), ("now", RateHistories)):
        with reading(histories):
            _page(client, url)  # warm
            times, rows, costs = [], [], {}
            for index in range(RUNS):
                page = f"{url}&page={index % pages + 1}"
                took, read, seen = _page(client, page)
                times.append(took)
                rows.append(read)
                costs.update(seen)
        figures[name] = (statistics.median(times), statistics.median(rows), costs)
    frozen.stop()
    before, now = figures["before"], figures["now"]
    same = "identical" if before[2] == now[2] else "DIFFERENT"
    report(
        "GET /api/v1/instances/ (pages of 50, ada), p50 before / now",
        f"{before[0] * 1000:.0f} / {now[0] * 1000:.0f} ms",
        f"median of {RUNS} over the {pages} pages; {len(now[2])} hosts' costs {same}",
    )
    report(
        "... spot-price rows read per page, median before / now",
        f"{before[1]:,.0f} / {now[1]:,.0f}",
        "rows the spot-price queries return",
    )
    assert before[2] == now[2], "the costs differ between the two readings"
