"""The catalog's writers tell other apps a list price was set through the price_changed pieces
of audit/registry.py, in their own transaction; nothing listens for saves behind their back."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from audit.registry import PRICE_CHANGED
from instances.models import InstanceType
from instances.services import instance_type_save, instance_type_sync
from instances.services.catalog import price_changed

HEARD: list[tuple[str, Decimal]] = []


def record(*, instance_type: InstanceType) -> None:
    """A hook: note which type was announced, at which price."""
    HEARD.append((instance_type.name, instance_type.on_demand_price_per_hour))


def record_again(*, instance_type: InstanceType) -> None:
    """A second hook, to show every piece runs, in order."""
    HEARD.append((f"again {instance_type.name}", instance_type.on_demand_price_per_hour))


@pytest.fixture
def heard():
    HEARD.clear()
    with PRICE_CHANGED.replaced({"record": record}):
        yield HEARD
    HEARD.clear()


def test_price_changed_runs_every_registered_hook_in_order(catalog, heard):
    with PRICE_CHANGED.replaced({"record": record, "again": record_again}):
        price_changed(catalog["g5.xlarge"])
    assert heard == [("g5.xlarge", Decimal("1.006")), ("again g5.xlarge", Decimal("1.006"))]


def test_no_hooks_registered_means_nothing_runs(catalog):
    with PRICE_CHANGED.replaced({}):
        price_changed(catalog["g5.xlarge"])  # no error, nothing to run


def test_an_admin_edit_of_the_price_runs_the_hooks_and_other_edits_do_not(catalog, heard):
    kind = catalog["g5.xlarge"]
    kind.on_demand_price_per_hour = Decimal("1.100000")
    instance_type_save(instance_type=kind)
    assert heard == [("g5.xlarge", Decimal("1.1"))]
    kind.vcpus = 8
    instance_type_save(instance_type=kind)
    assert heard == [("g5.xlarge", Decimal("1.1"))]


def test_a_type_created_in_the_admin_runs_the_hooks(catalog, heard):
    kind = InstanceType.objects.get(name="g5.xlarge")
    kind.pk, kind.name = None, "g5.2xlarge"
    instance_type_save(instance_type=kind)
    assert heard == [("g5.2xlarge", Decimal("1.006"))]


def test_a_sync_runs_the_hooks_for_new_types_and_new_prices_only(catalog, heard):
    from instances.data import ListPrice
    from instances.providers import get_provider

    kind = catalog["g5.xlarge"]
    specs = [spec for spec in get_provider().instance_types() if spec.name == "g5.xlarge"]

    def sync(price: str) -> None:
        listed = ListPrice(Decimal(price), source="x", as_of=kind.price_as_of)
        prices = {spec.name: listed for spec in specs}
        instance_type_sync(
            provider=kind.provider, specs=specs, prices=prices, deactivate_missing=False
        )

    sync("1.006")
    assert heard == []  # only the price source changed
    sync("1.2")
    assert heard == [("g5.xlarge", Decimal("1.2"))]
    specs.append(replace(specs[0], name="g5.new"))
    sync("1.2")  # the new type's price is set; g5.xlarge's is unchanged
    assert heard == [("g5.xlarge", Decimal("1.2")), ("g5.new", Decimal("1.2"))]
