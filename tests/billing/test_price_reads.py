"""A page of hosts reads the spot prices of its own hosts' times, and no others: the zones are
a handful of rows (not every price, as a DISTINCT over the model's ordering read them), and a
host of last month beside one of today does not read the weeks between."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import SpotPrice
from billing.services.prices import RateHistories, spans_of

DAYS = 30
EVERY = timedelta(minutes=10)


def rows_read(captured) -> int:
    """Rows the spot-price queries returned, counted again by the database."""
    total = 0
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if SpotPrice._meta.db_table in query["sql"]:
                cursor.execute(f"SELECT COUNT(*) FROM ({query['sql']}) AS counted")  # noqa: S608
                total += cursor.fetchone()[0]
    return total


@pytest.fixture
def spot_hosts(clock, catalog, running_host, alice):
    """Two of alice's spot g5.xlarge hosts, and a month of prices every ten minutes in three
    zones of the region (their zones among them)."""
    hosts = [running_host(market="spot", interruption_policy="notify") for _ in range(2)]
    region = settings.PORTAL_REGION
    zones = {f"{region}a", f"{region}b", f"{region}c"} | {h.availability_zone for h in hosts}
    now = timezone.now()
    rows = [
        SpotPrice(
            instance_type=catalog["g5.xlarge"],
            region=region,
            availability_zone=zone,
            at=now - DAYS * timedelta(days=1) + step * EVERY,
            price_per_hour=Decimal("0.3") + Decimal(step % 7) / 100,
        )
        for zone in sorted(zones)
        for step in range(DAYS * 144)
    ]
    SpotPrice.objects.bulk_create(rows, ignore_conflicts=True)
    return hosts, len(zones)


def test_a_host_of_last_month_and_one_of_today_read_their_own_hours_only(clock, spot_hosts):
    (old, new), zones = spot_hosts
    now = timezone.now()
    windows = [
        (old, now - timedelta(days=DAYS - 1), now - timedelta(days=DAYS - 1, hours=-1)),
        (new, now - timedelta(hours=1), now),
    ]
    with CaptureQueriesContext(connection) as captured:
        RateHistories(windows)
    # The zones, the price in force as each hour opens, and six prices an hour in each zone.
    assert rows_read(captured) <= zones + 2 * zones + 2 * 7 * zones
    assert SpotPrice.objects.count() > 10_000


def test_hosts_read_together_pay_what_each_pays_read_alone(clock, spot_hosts):
    (old, new), _ = spot_hosts
    now = timezone.now()
    windows = [
        (old, now - timedelta(days=20), now - timedelta(days=19, hours=20)),
        (new, now - timedelta(days=19, hours=22), now - timedelta(days=19)),  # overlaps
        (old, now - timedelta(days=3, minutes=5), now - timedelta(days=2)),
    ]
    together = RateHistories(windows)
    for host, start, end in windows:
        alone = RateHistories([(host, start, end)])
        for shared, own in zip(
            together.series(host, start, end), alone.series(host, start, end), strict=True
        ):
            assert (shared.points, shared.before_first) == (own.points, own.before_first)
            assert shared.points  # prices were found, not only the order's quote


def test_windows_that_overlap_or_touch_are_read_as_one_span():
    t = timezone.now()
    hour = timedelta(hours=1)
    windows = [(t, t + hour), (t + 2 * hour, t + 3 * hour), (t + hour, t + 2 * hour)]
    assert spans_of(windows) == [(t, t + 3 * hour)]
    assert spans_of([(t, t + hour), (t + 5 * hour, t + 6 * hour)]) == [
        (t, t + hour),
        (t + 5 * hour, t + 6 * hour),
    ]


def test_beyond_the_limit_the_shortest_gaps_are_read_too():
    t = timezone.now()
    hour = timedelta(hours=1)
    # Gaps of 1, 5 and 2 hours between four one-hour windows; two spans at most.
    windows = [(t, t + hour), (t + 2 * hour, t + 3 * hour)]
    windows += [(t + 8 * hour, t + 9 * hour), (t + 11 * hour, t + 12 * hour)]
    assert spans_of(windows, limit=2) == [(t, t + 3 * hour), (t + 8 * hour, t + 12 * hour)]
