"""Costs by pool: a pool's hosts carry the pool into their usage and rollups, so a report
groups by pool and filters to one, on the page and in /api/v1/costs/."""

from __future__ import annotations

import pytest

from billing.models import DailyRollup, Usage
from billing.services.rollups import rollups_rebuild
from instances import services
from instances.models import Image, Instance
from tests.conftest import ED25519


@pytest.fixture
def pooled(host, run, at, meter, alice, projects, catalog):
    """alice's pool of two g5.xlarge hosts ran 10 h each; her own order's host ran 2 h."""
    pool = services.pool_create(
        user=alice,
        project=projects["vision-lab"],
        name="notebooks",
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        ssh_public_key=ED25519,
        max_size=2,
        desired=2,
    )
    services.autoscale(now=at())
    for instance in Instance.objects.filter(pool=pool):
        run(instance, at(hours=1), at(hours=11), ended="terminated")
    run(host(), at(hours=1), at(hours=3))
    meter(now=at(hours=12))
    return {"pool": pool, "start": at().date().isoformat(), "end": at(hours=12).date().isoformat()}


def params(pooled, **extra) -> str:
    return "&".join(
        f"{k}={v}" for k, v in {"start": pooled["start"], "end": pooled["end"], **extra}.items()
    )


def test_usage_and_rollups_carry_the_pool(pooled):
    key = str(pooled["pool"].pk)
    assert set(Usage.objects.values_list("pool_key", flat=True)) == {key, ""}
    before = sorted(DailyRollup.objects.values_list("pool_key", "cost_rs"))
    assert {k for k, _ in before} == {key, ""}
    rollups_rebuild()  # the repair computes the same rows
    assert sorted(DailyRollup.objects.values_list("pool_key", "cost_rs")) == before


def test_costs_group_and_filter_by_pool(api_as, alice, pooled):
    pool = pooled["pool"]
    body = api_as(alice).get(f"/api/v1/costs/?{params(pooled, group_by='pool')}").json()
    groups = {g["label"]: g["cost"] for g in body["groups"]}
    assert groups == {"vision-lab/notebooks": "20.12", "no pool": "2.01"}
    only = api_as(alice).get(f"/api/v1/costs/?{params(pooled, pool=pool.pk)}").json()
    assert only["total"]["cost"] == "20.12"


def test_a_pool_the_viewer_cannot_see_is_a_400(api_as, carol, pooled):
    answer = api_as(carol).get(f"/api/v1/costs/?{params(pooled, pool=pooled['pool'].pk)}")
    assert answer.status_code == 400
    assert "is not the id of a pool you can see" in answer.content.decode()
    assert api_as(carol).get(f"/api/v1/costs/?{params(pooled, pool='nope')}").status_code == 400


def test_the_costs_page_offers_the_pool_filter(client, alice, pooled):
    client.force_login(alice)
    page = client.get(f"/costs/?{params(pooled, group_by='pool', pool=pooled['pool'].pk)}")
    assert page.status_code == 200
    text = page.content.decode()
    assert "vision-lab/notebooks" in text and "pool notebooks" in text
