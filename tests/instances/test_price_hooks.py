"""The catalog's writers tell other apps a list price was set through INSTANCE_PRICE_HOOKS,
in their own transaction; nothing listens for saves behind their back."""

from __future__ import annotations

from decimal import Decimal

import pytest

from instances.hooks import price_changed
from instances.models import InstanceType
from instances.services import instance_type_save, instance_type_sync

HEARD: list[tuple[str, Decimal]] = []


def record(*, instance_type: InstanceType) -> None:
    """A hook: note which type was announced, at which price."""
    HEARD.append((instance_type.name, instance_type.on_demand_price_per_hour))


@pytest.fixture
def heard(settings):
    settings.INSTANCE_PRICE_HOOKS = ["tests.instances.test_price_hooks.record"]
    HEARD.clear()
    yield HEARD
    HEARD.clear()


def test_price_changed_runs_every_hook_named_in_settings(settings, catalog, heard):
    settings.INSTANCE_PRICE_HOOKS = ["tests.instances.test_price_hooks.record"] * 2
    price_changed(catalog["g5.xlarge"])
    assert heard == [("g5.xlarge", Decimal("1.006"))] * 2


def test_no_hooks_named_means_nothing_runs(settings, catalog):
    del settings.INSTANCE_PRICE_HOOKS
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
    from instances.catalog import ListPrice
    from instances.providers.base import InstanceTypeSpec

    kind = catalog["g5.xlarge"]
    spec = InstanceTypeSpec(
        name="g5.xlarge",
        gpu_model=kind.gpu_model,
        gpu_count=kind.gpu_count,
        gpu_memory_gib=kind.gpu_memory_gib,
        vcpus=kind.vcpus,
        memory_gib=kind.memory_gib,
        local_nvme_gb=kind.local_nvme_gb,
        network_gbps=kind.network_gbps,
        network_burst=kind.network_burst,
        efa=kind.efa,
        regions=tuple(kind.regions),
        spot=kind.spot_offered,
    )
    same = ListPrice(on_demand=kind.on_demand_price_per_hour, source="x", as_of=kind.price_as_of)
    instance_type_sync(
        provider=kind.provider, specs=[spec], prices={"g5.xlarge": same}, deactivate_missing=False
    )
    assert heard == []  # only the price source changed
    dearer = ListPrice(on_demand=Decimal("1.2"), source="x", as_of=kind.price_as_of)
    instance_type_sync(
        provider=kind.provider, specs=[spec], prices={"g5.xlarge": dearer}, deactivate_missing=False
    )
    assert heard == [("g5.xlarge", Decimal("1.2"))]
