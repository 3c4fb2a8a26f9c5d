"""A host's cost so far (its page, My hosts, the instances API) is what metering bills for it.

The live figure comes from instances.selectors.costs, which asks billing through the
registry's instance_cost slot: the same rules table and price histories as metering, so for
every case the tests drive the live figure at a moment equals the metered rows at that moment,
to the micro-dollar.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.lib.money import dollars
from billing.lib.rules import Ended
from billing.models import Usage
from instances.models import Instance, InstanceType
from instances.selectors.costs import cost_so_far, costs_so_far
from instances.services import instance_type_record_spot_price
from tests.billing.test_metering import SCRIPTS
from tests.billing.test_rules import CASES
from tests.billing.timeline import _move

HOW = {Ended.STOPPED: "terminated", Ended.CLOUD_INTERRUPTION: "interrupted"}


def metered(instance: Instance) -> Decimal:
    total = Usage.objects.filter(instance=instance).aggregate(cost=Sum("cost_rs"))["cost"]
    return dollars(total or 0, places=6)


def live(instance: Instance, now) -> Decimal:
    """The figure as the pages read it: the host fresh from the database, events prefetched."""
    fresh = Instance.objects.prefetch_related("events").get(pk=instance.pk)
    figure = cost_so_far(fresh, list(fresh.events.all()), now)
    assert costs_so_far([fresh], now=now) == {fresh.pk: figure}
    return figure


def quote_spot(catalog, price: str) -> None:
    """The spot price the catalog shows, which an order quotes."""
    kind = catalog["g5.xlarge"]
    instance_type_record_spot_price(
        instance_type_id=kind.pk, price_per_hour=Decimal(price), at=timezone.now()
    )
    kind.refresh_from_db()


@pytest.fixture
def same(meter):
    """Meter at ``now`` and check that the live figure is the bill; return the figure."""

    def check(instance: Instance, now) -> Decimal:
        meter(now=now)
        bill = metered(instance)
        assert live(instance, now) == bill
        return bill

    return check


@pytest.mark.parametrize(("market", "ended", "seconds", "billed", "rule"), CASES)
def test_every_row_of_the_rules_table_shows_what_it_bills(
    market, ended, seconds, billed, rule, host, run, at, same
):
    instance = host(market=market)
    if ended == Ended.STILL_RUNNING:
        run(instance, at())
        now = at(seconds=seconds)
    else:
        run(instance, at(), at(seconds=seconds), ended=HOW[ended])
        now = at(seconds=seconds + 600)
    bill = same(instance, now)
    # No spot price was ever seen: every second at the list price (the spot order's quote).
    assert bill == dollars(billed * 1_006_000, places=6)
    assert Usage.objects.filter(instance=instance).values_list("rule", flat=True)[0] == rule


@pytest.mark.parametrize(
    ("story", "market", "runs", "now", "seconds"), SCRIPTS, ids=[s[0] for s in SCRIPTS]
)
def test_every_metering_script_shows_what_it_bills(
    story, market, runs, now, seconds, play, at, same
):
    instance = play(market, runs)
    assert same(instance, at(seconds=now)) == dollars(seconds * 1_006_000, places=6)


def test_spot_interrupted_after_50_minutes_shows_nothing(catalog, host, run, at, same, spot_price):
    """The issue's first figure: $0.29 (50 minutes at the quoted $0.35) where the bill says $0."""
    quote_spot(catalog, "0.35")
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    instance = run(host(market="spot"), at(), at(minutes=50), ended="interrupted")
    assert instance.order.quoted_price_per_hour == Decimal("0.35")
    assert same(instance, at(hours=2)) == Decimal("0")


def test_spot_across_a_spot_price_change_shows_both_prices(
    catalog, host, run, at, same, spot_price
):
    """The issue's second figure: $0.61 (105 minutes at the quoted $0.35) where the bill says
    $0.75 (30 minutes at $0.35, then 75 at $0.46)."""
    quote_spot(catalog, "0.35")
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    spot_price("g5.xlarge", "0.4600", at(minutes=30))
    instance = run(host(market="spot"), at(), at(minutes=105), ended="terminated")
    assert same(instance, at(hours=3)) == Decimal("0.750000")


def test_on_demand_across_a_list_price_change_shows_both_prices(host, run, at, same, list_price):
    """The issue's third figure: $5.67 (an hour at the quoted $5.672) where the bill says $5.84
    (half an hour at $5.672, half at $6.00)."""
    list_price("g5.12xlarge", "5.672", at(hours=-48))
    list_price("g5.12xlarge", "6.000", at(minutes=30))
    instance = run(host(instance_type="g5.12xlarge"), at(), at(hours=1), ended="terminated")
    assert same(instance, at(hours=2)) == Decimal("5.836000")


def test_several_runs_across_price_changes_and_midnight(host, run, at, same, list_price):
    list_price("g5.xlarge", "1.006", at(hours=-48))
    list_price("g5.xlarge", "1.250", at(hours=-1.5))
    list_price("g5.xlarge", "0.999", at(hours=5))
    instance = run(host(), at(hours=-2), at(hours=1))  # across a change and midnight
    instance = run(instance, at(hours=2), at(hours=2, seconds=20))  # the minute minimum
    instance = run(instance, at(hours=4), at(hours=6), ended="terminated")  # another change
    expected = (
        1800 * 1_006_000 + 9000 * 1_250_000 + 60 * 1_250_000 + 3600 * 1_250_000 + 3600 * 999_000
    )
    assert same(instance, at(hours=7)) == dollars(expected, places=6)


def test_spot_in_a_zone_without_prices_uses_the_region_wide_ones(host, run, at, same, spot_price):
    spot_price("g5.xlarge", "0.3000", at(hours=-5), zone="")
    spot_price("g5.xlarge", "0.9000", at(hours=-5), zone="us-east-1z")  # another zone's price
    spot_price("g5.xlarge", "0.4000", at(minutes=20), zone="")
    instance = run(host(market="spot"), at(), at(hours=1), ended="terminated")
    Instance.objects.filter(pk=instance.pk).update(availability_zone="us-east-1c")
    expected = 1200 * 300_000 + 2400 * 400_000
    assert same(instance, at(hours=2)) == dollars(expected, places=6)


def test_a_running_host_shows_what_each_pass_bills_as_it_grows(host, run, at, same, spot_price):
    spot_price("g5.xlarge", "0.3500", at(hours=-5))
    spot_price("g5.xlarge", "0.4200", at(minutes=90))
    instance = run(host(market="spot"), at())
    figures = [same(instance, at(minutes=minutes)) for minutes in (0, 30, 60, 120)]
    assert figures == [
        dollars(60 * 350_000, places=6),  # the first minute at once
        dollars(1800 * 350_000, places=6),
        dollars(3600 * 350_000, places=6),
        dollars(5400 * 350_000 + 1800 * 420_000, places=6),
    ]
    # Interrupted at 50 minutes after all (recorded late): the hour is free, live and billed.
    _move(instance, "interrupted", at(minutes=50))
    assert same(instance, at(hours=3)) == Decimal("0")


def test_the_60_second_minimum_at_the_list_price_is_the_api_figure(
    running_host, api_as, alice, clock
):
    """tests/instances/test_instance_api.py's figure: a minute at $1.006/h is $0.016767."""
    host = running_host()
    body = api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()
    assert body["cost_so_far"] == "0.016767"


def _live_queries(units: int, *, host, run, at, spot_price, list_price) -> int:
    with transaction.atomic():
        for unit in range(units):
            spot_price("g5.xlarge", f"0.{30 + unit:02d}00", at(minutes=20 + unit))
            list_price("g5.xlarge", f"1.{100 + unit}", at(minutes=40 + unit))
            run(host(), at(), at(hours=1), ended="terminated")
            run(host(market="spot"), at(), at(minutes=50), ended="interrupted")
            run(host(market="spot"), at(minutes=5))
        hosts = list(Instance.objects.all())
        with CaptureQueriesContext(connection) as queries:
            figures = costs_so_far(hosts, now=at(hours=2))
        assert len(figures) == 3 * units
        transaction.set_rollback(True)
    return len(queries)


def test_many_hosts_cost_the_same_queries_as_a_few(host, run, at, spot_price, list_price):
    fixtures = {"host": host, "run": run, "at": at, "spot_price": spot_price}
    # Events, types, orders, then list prices and the spot zones, opening and inside prices.
    assert _live_queries(2, list_price=list_price, **fixtures) == 7
    assert _live_queries(8, list_price=list_price, **fixtures) == 7


def test_an_ended_host_metered_in_pieces_still_matches(host, run, at, meter, list_price):
    """Passes at every step of the timeline (incremental metering) give the live figure too."""
    list_price("g5.xlarge", "1.006", at(hours=-48))
    list_price("g5.xlarge", "1.100", at(minutes=45))
    # The catalog says so too, or a pass would record its price again (as a price change).
    InstanceType.objects.filter(name="g5.xlarge").update(on_demand_price_per_hour="1.1")
    instance = run(host(), at(hours=-1))
    for minutes in (-30, 0, 30, 60):
        meter(now=at(minutes=minutes))
    instance = _move(instance, "terminating", at(minutes=90))
    _move(instance, "terminated", at(minutes=90))
    meter(now=at(hours=2))
    assert live(instance, at(hours=2)) == metered(instance)
    # 150 minutes: 105 at $1.006, then 45 at $1.10.
    assert metered(instance) == dollars(6300 * 1_006_000 + 2700 * 1_100_000, places=6)
