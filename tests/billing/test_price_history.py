"""Billing keeps the list price history through the catalog's hooks (price_changed),
not a signal: every writer of a price records it, a save behind the services waits for the
next metering pass."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.contrib import admin
from django.test import RequestFactory

from audit.registry import PRICE_CHANGED
from billing.models import ListPrice
from billing.services.metering import usage_meter
from billing.services.prices import list_price_record
from instances.models import InstanceType


def history(name: str) -> list[Decimal]:
    rows = ListPrice.objects.filter(instance_type__name=name).order_by("at", "pk")
    return [row.price_per_hour for row in rows]


def test_billing_records_list_prices_through_the_catalog_hook():
    assert list_price_record in list(PRICE_CHANGED)


def test_a_synced_catalog_has_every_type_in_the_history(catalog):
    assert {name: history(name) for name in catalog} == {
        name: [kind.on_demand_price_per_hour] for name, kind in catalog.items()
    }


def test_an_admin_edit_of_the_price_enters_the_history(catalog, ada, clock):
    kind = InstanceType.objects.get(name="g5.xlarge")
    clock.shift(timedelta(minutes=5))
    kind.on_demand_price_per_hour = Decimal("1.250000")
    request = RequestFactory().post("/admin/instances/instancetype/")
    request.user = ada
    admin.site._registry[InstanceType].save_model(request, kind, form=None, change=True)
    assert history("g5.xlarge") == [Decimal("1.006"), Decimal("1.25")]


def test_a_save_behind_the_services_records_nothing_until_the_next_pass(catalog, at):
    kind = InstanceType.objects.get(name="g5.xlarge")
    kind.on_demand_price_per_hour = Decimal("1.300000")
    kind.save()  # no signal writes billing rows behind the caller's back
    assert history("g5.xlarge") == [Decimal("1.006")]
    usage_meter(now=at())
    assert history("g5.xlarge") == [Decimal("1.006"), Decimal("1.3")]
