"""The catalog page: cards, filters and errors a researcher can read."""

from __future__ import annotations

from decimal import Decimal

import pytest
from bs4 import BeautifulSoup


@pytest.fixture
def page(client, alice, catalog):
    client.force_login(alice)

    def get(query: str = ""):
        response = client.get(f"/catalog/?{query}")
        return response, BeautifulSoup(response.content, "html.parser")

    return get


def card_names(soup) -> list[str]:
    return [card["data-type"] for card in soup.select("article.host")]


def test_catalog_shows_every_type_cheapest_first(page, catalog):
    response, soup = page()
    assert response.status_code == 200
    names = card_names(soup)
    assert set(names) == set(catalog)
    assert names[0] == "g6.xlarge"


def test_card_shows_price_per_hour_and_per_gpu_hour_and_images(page):
    _, soup = page("gpu_model=H100")
    card = soup.select_one('article[data-type="p5.48xlarge"]')
    text = card.get_text(" ", strip=True)
    assert "$98.32" in text and "$12.29 per GPU-hour" in text
    assert "8× H100" in text
    assert "TF 2.17.0" in text and "TF 2.11.0" not in text


def test_filters_narrow_the_cards(page):
    _, soup = page("gpu_model=A100&min_gpu_memory_gib=80")
    assert card_names(soup) == ["p4de.24xlarge"]


def test_bad_filter_shows_a_message_and_a_400(page):
    response, soup = page("max_price=-3")
    assert response.status_code == 400
    assert "Must be 0 or more" in soup.select_one(".alert-error").get_text()
    assert card_names(soup) == []


def test_spot_price_is_shown_when_known(page):
    from billing.services.prices import spot_prices_refresh

    spot_prices_refresh()
    _, soup = page("gpu_model=L4&gpu_count=1")
    assert "Spot $" in soup.select_one('article[data-type="g6.xlarge"]').get_text()


def test_a_spot_price_no_cloud_would_charge_is_shown_unverified(page, catalog, client):
    """moto's $0.00001/h (dated 2006) once reached the catalog as a 99.99 % saving."""
    from django.utils import timezone

    from instances.models import InstanceType
    from instances.services import instance_type_record_spot_price
    from instances.services.orders import order_estimate

    g5 = catalog["g5.xlarge"]
    instance_type_record_spot_price(
        instance_type_id=g5.pk, price_per_hour=Decimal("0.00001"), at=timezone.now()
    )
    _, soup = page()
    text = soup.select_one('article[data-type="g5.xlarge"]').get_text(" ", strip=True)
    assert "unverified" in text and "under 1 % of the on-demand price" in text
    assert "−100%" not in text
    api = client.get("/api/v1/instance-types/g5.xlarge/").json()
    assert "under 1 % of the on-demand price" in api["spot_price_doubt"]
    g5 = InstanceType.objects.get(pk=g5.pk)
    estimate = order_estimate(instance_type=g5, market="spot", count=1, lease_hours=1)
    assert estimate.price_per_host_hour == g5.on_demand_price_per_hour
    assert "under 1 %" in estimate.basis
    # A price a cloud would charge is taken as it is.
    instance_type_record_spot_price(
        instance_type_id=g5.pk, price_per_hour=Decimal("0.3018"), at=timezone.now()
    )
    g5 = InstanceType.objects.get(pk=g5.pk)
    assert g5.spot_price_doubt == ""
    estimate = order_estimate(instance_type=g5, market="spot", count=1, lease_hours=1)
    assert estimate.price_per_host_hour == Decimal("0.3018")


def test_a_spot_price_not_refreshed_for_a_week_is_shown_unverified(catalog, clock):
    from datetime import timedelta

    from django.utils import timezone

    from instances.models import InstanceType
    from instances.services import instance_type_record_spot_price

    g5 = catalog["g5.xlarge"]
    seen = timezone.now()
    instance_type_record_spot_price(
        instance_type_id=g5.pk, price_per_hour=Decimal("0.3018"), at=seen
    )
    clock.shift(timedelta(days=7, minutes=1))
    doubt = InstanceType.objects.get(pk=g5.pk).spot_price_doubt
    assert f"last seen {seen:%Y-%m-%d} and has not been refreshed since" in doubt
