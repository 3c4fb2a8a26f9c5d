"""The order page tells the limits first: the estimate matches the inputs or says the order is
not valid, the quota's and budget's headroom and the approval reason show before submit, and a
refusal is said in the page's words beside its field, with what was typed kept."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing.services.budgets import budget_set
from instances.models import ApprovalPolicy, Order
from instances.services import quota_set
from tests.conftest import ED25519

pytestmark = pytest.mark.django_db

ORDER = "/catalog/g5.xlarge/order/"
ESTIMATE = "/catalog/g5.xlarge/estimate/"


@pytest.fixture
def page(alice, catalog):
    client = Client()
    client.force_login(alice)
    return client


def form(**overrides) -> dict:
    data = {
        "submission": "5b8f0a3e-3f7c-4d38-9a0f-7d6c7b1e2a10",
        "project": "vision-lab",
        "image": "tf-2.17-cuda12.3",
        "market": "on_demand",
        "count": "1",
        "lease_hours": "8",
        "ssh_public_key": ED25519,
        "interruption_policy": "",
    }
    data.update(overrides)
    return data


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def estimate(page, **query) -> str:
    response = page.get(ESTIMATE, {"project": "vision-lab", "market": "on_demand", **query})
    assert response.status_code == 200
    return text(response)


# --- the estimate matches the inputs --------------------------------------------------------


def test_the_estimate_prices_the_hosts_and_hours_asked_for(page, catalog):
    body = estimate(page, count="3", lease_hours="10")
    rate = catalog["g5.xlarge"].on_demand_price_per_hour
    assert "3 × g5.xlarge" in body
    assert "10 h lease" in body
    assert f"${rate * 3 * 10:,.2f}" in body


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"count": "999"}, "Choose between 1 and 8 hosts."),
        ({"count": "0"}, "Choose between 1 and 8 hosts."),
        ({"count": "-2"}, "Choose between 1 and 8 hosts."),
        ({"lease_hours": "200"}, "A lease lasts from 1 to 168 hours."),
        ({"lease_hours": "0"}, "A lease lasts from 1 to 168 hours."),
    ],
)
def test_an_estimate_out_of_bounds_says_the_order_is_not_valid(page, query, problem):
    body = estimate(page, **query)
    assert "Not a valid order yet" in body
    assert problem in body
    assert 'data-estimate="per_lease"' not in body
    assert "8 ×" not in body and "1 ×" not in body and "168 h lease" not in body


def test_a_lease_past_the_projects_quota_is_not_valid_and_the_input_says_its_bound(
    page, projects, ada
):
    quota_set(project=projects["vision-lab"], actor=ada, max_lease_hours=24)
    body = estimate(page, lease_hours="48")
    assert "A lease can last at most 24 hours in this project." in body
    assert 'data-lease-max="24"' in body
    order_page = text(page.get(ORDER))
    assert 'name="lease_hours" id="id_lease_hours" min="1" max="24"' in order_page


# --- the limits before submit ---------------------------------------------------------------


def test_the_limits_show_before_submit(page, projects, ada, fin, place_order, alice):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=4, max_lease_hours=48)
    budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="1000")
    place_order(alice)  # one g5.xlarge: one GPU in use
    body = estimate(page, count="2", lease_hours="8")
    assert "GPUs left in vision-lab" in body
    assert "3 of 4" in body and "1 after this order" in body
    assert "Longest lease" in body and "48 h" in body
    assert "Budget left in" in body
    # A host count the quota cannot hold is the input's bound.
    assert 'data-count-max="3"' in body
    assert "Up to 8 in one order; the quota has room for 3 now." in body


def test_an_order_the_quota_refuses_says_so_before_submit(page, projects, ada):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=2)
    body = estimate(page, count="3")
    assert "Quota exceeded: vision-lab may run 2 GPUs" in body
    assert 'data-estimate="refusal"' in body


def test_an_order_over_the_budget_is_refused_before_submit(page, projects, ada):
    budget_set(project=projects["vision-lab"], actor=ada, monthly_amount="5", policy="block_all")
    body = estimate(page, count="1", lease_hours="100")
    assert "Budget exceeded: vision-lab has $5.00 left" in body


def test_an_order_that_needs_approval_says_why_before_submit(page, projects):
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=1)
    body = estimate(page, count="2")
    assert "Needs approval because 2 GPUs is more than the 1 vision-lab allows" in body


def test_finance_sees_the_price_without_limits(catalog, fin):
    client = Client()
    client.force_login(fin)
    body = text(client.get(ESTIMATE, {"count": "2", "lease_hours": "5"}))
    assert 'data-estimate="per_lease"' in body


# --- errors at the field, in the page's words -----------------------------------------------


def field_error(body: str, field: str) -> str:
    found = re.search(rf'<div class="field-error" id="id_{field}-error">(.*?)</div>', body)
    assert found, f"no error under {field}"
    return re.sub(r"<[^>]+>", " ", found.group(1)).strip()


def test_too_many_hosts_is_said_at_the_field_with_what_was_typed_kept(page):
    response = page.post(ORDER, form(count="999", lease_hours="200"))
    assert response.status_code == 400
    body = text(response)
    assert field_error(body, "count") == "Choose between 1 and 8 hosts."
    assert field_error(body, "lease_hours") == "A lease lasts from 1 to 168 hours."
    assert (
        'value="999" inputmode="numeric" aria-invalid="true" aria-describedby="id_count-error"'
        in body
    )
    assert 'value="200"' in body
    assert "must be between" not in body and "Ensure this value" not in body
    assert not Order.objects.exists()


def test_a_lease_past_the_quota_is_said_at_the_lease(page, projects, ada):
    quota_set(project=projects["vision-lab"], actor=ada, max_lease_hours=12)
    body = text(page.post(ORDER, form(lease_hours="20")))
    assert field_error(body, "lease_hours") == "A lease can last at most 12 hours in this project."


def test_a_spot_price_below_the_market_is_said_in_dollars(page, catalog):
    kind = catalog["g5.xlarge"]
    kind.spot_price_per_hour = Decimal("0.3515")
    kind.spot_price_at = timezone.now()
    kind.save(update_fields=["spot_price_per_hour", "spot_price_at"])
    body = text(
        page.post(ORDER, form(market="spot", max_spot_price="0.01", interruption_policy="notify"))
    )
    assert field_error(body, "max_spot_price").startswith(
        "Your maximum spot price $0.0100/h is below the current spot price $0.3515/h"
    )


def test_words_the_browser_cannot_read_as_numbers_are_said_plainly(page):
    body = text(page.post(ORDER, form(count="two", ssh_public_key="")))
    assert field_error(body, "count") == "Give the number of hosts as a whole number, e.g. 2."
    assert field_error(body, "ssh_public_key").startswith("Paste your SSH public key")
    assert 'id="id_ssh_public_key"' in body and 'aria-invalid="true"' in body


def test_the_api_keeps_its_codes_and_sentences(api_as, alice, catalog, order_body):
    response = api_as(alice).post("/api/v1/orders/", order_body(count=9), format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"]
    assert "count must be between 1 and 8" in " ".join(body["fields"]["count"])


# --- clusters --------------------------------------------------------------------------------


def test_the_page_orders_a_cluster_and_says_its_bounds_in_words(page, catalog):
    cluster = "/catalog/p4d.24xlarge/order/"
    body = text(page.get(cluster.replace("order/", "estimate/"), {"placement": "cluster"}))
    assert "2 to 16 in one cluster." in body
    refused = page.post(cluster, form(placement="cluster", count="1", image="tf-2.20-cuda12.5"))
    assert refused.status_code == 400
    assert "A cluster has 2 to 16 hosts." in text(refused)
    assert Order.objects.count() == 0
    placed = page.post(cluster, form(placement="cluster", count="2", image="tf-2.20-cuda12.5"))
    assert placed.status_code == 302
    order = Order.objects.get()
    assert order.is_cluster and order.count == 2 and order.efa
    assert sorted(order.instances.values_list("rank", flat=True)) == [0, 1]
