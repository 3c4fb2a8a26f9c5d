"""MIG slices in the catalog: the profiles of each MIG-capable GPU (NVIDIA's table: memory,
compute slices of seven, how many one GPU holds) kept by sync_catalog, their price per
slice-hour (a share of one GPU's price that an admin sets, kept across syncs), listed by
/api/v1/mig-profiles/ and on the catalog page."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from instances.models import InstanceType, MigProfile
from instances.services.catalog import mig_profiles_sync

pytestmark = pytest.mark.django_db


def slices(api, **query) -> list[dict]:
    answer = api.get("/api/v1/mig-profiles/", query)
    assert answer.status_code == 200, answer.json()
    return answer.json()["results"]


def test_the_reference_gives_every_mig_gpu_its_profiles(catalog):
    a100 = MigProfile.objects.filter(gpu_model="A100", gpu_memory_gib=40)
    assert [(p.name, p.compute_slices, p.memory_gb, p.per_gpu) for p in a100] == [
        ("1g.5gb", 1, 5, 7),
        ("1g.10gb", 1, 10, 4),
        ("2g.10gb", 2, 10, 3),
        ("3g.20gb", 3, 20, 2),
        ("4g.20gb", 4, 20, 1),
        ("7g.40gb", 7, 40, 1),
    ]
    h200 = MigProfile.objects.filter(gpu_model="H200").values_list("name", flat=True)
    assert list(h200) == ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    assert MigProfile.objects.get(
        gpu_model="A100", gpu_memory_gib=40, name="3g.20gb"
    ).price_share == (Decimal("0.4286"))
    assert not MigProfile.objects.filter(gpu_model__in=["A10G", "L4", "L40S"]).exists()


def test_a_slice_costs_its_share_of_one_gpus_price_on_demand_and_spot(api_as, alice, catalog):
    # The spot price of the moment, as the spot-price pass records it; then no spot price.
    InstanceType.objects.filter(name="p4d.24xlarge").update(spot_price_per_hour=Decimal("12.60"))
    p4d = InstanceType.objects.get(name="p4d.24xlarge")
    assert p4d.spot_offered
    listed = {row["profile"]: row for row in slices(api_as(alice), instance_type="p4d.24xlarge")}
    assert list(listed) == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    one = listed["1g.5gb"]
    per_gpu = p4d.on_demand_price_per_hour / p4d.gpu_count
    assert Decimal(one["on_demand_price_per_hour"]) == (per_gpu * Decimal("0.1429")).quantize(
        Decimal("0.000001")
    )
    assert (one["compute_share"], one["memory_gb"], one["per_gpu"]) == ("1/7", 5, 7)
    assert one["per_host"] == 7 * p4d.gpu_count and one["gpu_model"] == "A100"
    # 12.60 / 8 GPUs x 0.1429
    assert Decimal(one["spot_price_per_hour"]) == Decimal("0.225068")
    InstanceType.objects.filter(name="p4d.24xlarge").update(spot_price_per_hour=None)
    again = slices(api_as(alice), instance_type="p4d.24xlarge")[0]
    assert again["spot_price_per_hour"] is None
    # A whole GPU's slice costs the GPU's price.
    assert Decimal(listed["7g.40gb"]["on_demand_price_per_hour"]) == per_gpu.quantize(
        Decimal("0.000001")
    )


def test_an_admins_share_sets_the_price_and_outlives_the_next_sync(
    api_as, alice, admin_user, catalog
):
    profile = MigProfile.objects.get(gpu_model="A100", gpu_memory_gib=40, name="1g.5gb")
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/instances/migprofile/")
    assert page.status_code == 200 and "1g.5gb" in page.content.decode()
    assert client.get("/admin/instances/migprofile/add/").status_code == 403
    profile.price_share = Decimal("0.2000")
    profile.save()
    assert mig_profiles_sync() == 0  # nothing new
    profile.refresh_from_db()
    assert profile.price_share == Decimal("0.2000")
    p4d = InstanceType.objects.get(name="p4d.24xlarge")
    row = slices(api_as(alice), instance_type="p4d.24xlarge")[0]
    expected = (p4d.on_demand_price_per_hour / p4d.gpu_count * Decimal("0.2")).quantize(
        Decimal("0.000001")
    )
    assert Decimal(row["on_demand_price_per_hour"]) == expected


def test_slices_are_listed_by_gpu_model_in_a_fixed_number_of_queries(api_as, alice, catalog):
    api = api_as(alice)
    h100 = slices(api, gpu_model="h100")
    assert h100 and {row["gpu_model"] for row in h100} == {"H100"}
    assert slices(api, instance_type="g5.xlarge") == []  # an A10G has no MIG
    with CaptureQueriesContext(connection) as every:
        everything = slices(api)
    with CaptureQueriesContext(connection) as one:
        slices(api, instance_type="p4d.24xlarge")
    assert len(one.captured_queries) == len(every.captured_queries) + 1  # the type lookup
    mig_types = InstanceType.objects.offered().exclude(mig_profiles=[]).count()
    assert len({row["instance_type"] for row in everything}) == mig_types > 1


@pytest.mark.parametrize(
    ("query", "field"),
    [({"instance_type": "z9.mega"}, "instance_type"), ({"colour": "red"}, "colour")],
)
def test_a_bad_question_is_a_400_with_a_sentence(api_as, alice, catalog, query, field):
    answer = api_as(alice).get("/api/v1/mig-profiles/", query)
    assert answer.status_code == 400
    assert field in answer.json()["fields"] and answer.json()["detail"].endswith(".")


def test_the_catalog_page_lists_a_types_slices_with_their_prices(alice, catalog):
    client = Client()
    client.force_login(alice)
    page = client.get("/catalog/").content.decode()
    assert 'data-testid="mig-slices"' in page and "1g.5gb" in page and "7g.141gb" in page
