"""A metering pass runs the same number of queries whatever the number of hosts and prices."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from billing.models import Usage
from billing.services.metering import usage_meter


def _pass_queries(units: int, *, host, run, at, spot_price, list_price) -> tuple[int, int]:
    """Queries of a first pass and of a second one over ``units`` copies of the same fleet.

    Each copy brings its own price changes (a spot price, a list price, each inside the runs)
    and four hosts: on-demand across the list change, spot across the spot change, spot the
    cloud interrupts after 50 minutes, and one still running. Between the passes each copy gets
    a late spot price and its running host stops. Rolled back, so that two sizes compare."""
    with transaction.atomic():
        running = []
        for unit in range(units):
            spot_price("g5.xlarge", f"0.{30 + unit:02d}00", at(hours=-5, minutes=unit))
            spot_price("g5.xlarge", f"0.{60 + unit:02d}00", at(minutes=30 + unit))
            list_price("g5.xlarge", f"1.{100 + unit}", at(hours=1, minutes=unit))
            run(host(), at(), at(hours=2), ended="terminated")
            run(host(market="spot"), at(), at(hours=1), ended="terminated")
            run(host(market="spot"), at(), at(minutes=50), ended="interrupted")
            running.append(run(host(), at(minutes=10)))
        with CaptureQueriesContext(connection) as first:
            usage_meter(now=at(hours=3))
        for unit, instance in enumerate(running):
            spot_price("g5.xlarge", f"0.{40 + unit:02d}00", at(minutes=45 + unit))
            run(instance, at(minutes=10), at(hours=3, minutes=30))  # stops it
        with CaptureQueriesContext(connection) as second:
            usage_meter(now=at(hours=4))
        # The passes did the work: rows for every host, its runs cut at every price change
        # (each copy's prices split every copy's runs: the rows grow faster than the hosts).
        assert Usage.objects.values("instance").distinct().count() == 4 * units
        assert Usage.objects.count() > 8 * units
        transaction.set_rollback(True)
    return len(first), len(second)


# On SQLite Django cuts each bulk write by the 999-parameter limit, so the count grows there
# with the rows written; PostgreSQL takes each in one statement.
@pytest.mark.postgres
def test_a_metering_pass_runs_the_same_queries_for_four_times_the_hosts_and_prices(
    host, run, at, spot_price, list_price
):
    fixtures = {"host": host, "run": run, "at": at, "spot_price": spot_price}
    small = _pass_queries(2, list_price=list_price, **fixtures)
    large = _pass_queries(8, list_price=list_price, **fixtures)
    print(f"queries per pass (first, second): 8 hosts {small}, 32 hosts {large}")
    assert small == large
