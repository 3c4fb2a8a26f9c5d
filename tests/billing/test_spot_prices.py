"""Spot prices come from the provider into a history; the catalog shows the newest."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import SpotPrice
from billing.services.prices import spot_prices_refresh
from billing.tasks import refresh_spot_prices
from instances.models import InstanceType
from instances.providers.simulated import SimulatedProvider


def test_refresh_records_each_spot_type_once_and_the_catalog_shows_it(catalog):
    added = spot_prices_refresh()
    spot_types = InstanceType.objects.offered().filter(spot_offered=True)
    assert added == spot_types.count()
    assert spot_prices_refresh() == 0  # same window again: nothing new
    for row in spot_types:
        row.refresh_from_db()
        newest = SpotPrice.objects.filter(instance_type=row).latest("at")
        assert row.spot_price_per_hour == newest.price_per_hour
        assert Decimal(0) < row.spot_price_per_hour < row.on_demand_price_per_hour
    assert InstanceType.objects.get(name="p5e.48xlarge").spot_price_per_hour is None


def test_the_beat_task_runs_the_refresh(catalog):
    assert refresh_spot_prices.apply().get() > 0


def test_simulated_spot_price_moves_over_time_and_is_repeatable(clock, settings):
    provider = SimulatedProvider()
    now = timezone.now()
    prices = {
        provider.spot_price_at("p5.48xlarge", Decimal("98.32"), now + timedelta(hours=h))
        for h in range(6)
    }
    assert len(prices) > 1
    again = SimulatedProvider().spot_price_at("p5.48xlarge", Decimal("98.32"), now)
    assert again == provider.spot_price_at("p5.48xlarge", Decimal("98.32"), now)


def test_an_older_observation_never_replaces_a_newer_one(clock, catalog):
    from instances.services import instance_type_record_spot_price

    row = catalog["g5.xlarge"]
    now = timezone.now()
    instance_type_record_spot_price(instance_type_id=row.pk, price_per_hour=Decimal("0.40"), at=now)
    instance_type_record_spot_price(
        instance_type_id=row.pk, price_per_hour=Decimal("0.10"), at=now - timedelta(hours=1)
    )
    row.refresh_from_db()
    assert row.spot_price_per_hour == Decimal("0.40")
