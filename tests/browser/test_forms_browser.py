"""Forms that tell the limits first (issue 13): the order page shows the quota's and the
budget's headroom before submit and prices exactly what is typed; a refusal is said at its
field (aria-invalid, aria-describedby) with the cursor on it; creating an API token redirects,
so reloading the page creates no second token."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from billing.services.budgets import budget_set
from instances.models import Order
from instances.services import quota_set
from portal.models import ApiToken
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def limits(projects, ada, fin, catalog):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=4, max_lease_hours=48)
    budget_set(project=projects["vision-lab"], actor=fin, monthly_amount="500")


def test_the_order_page_shows_the_limits_before_submit(page, sign_in, alice, limits):
    sign_in("alice")
    page.goto("/catalog/g5.xlarge/order/")
    estimate = page.locator("#estimate")
    expect(estimate).to_contain_text("GPUs left in vision-lab")
    expect(estimate).to_contain_text("4 of 4")
    expect(estimate).to_contain_text("Longest lease")
    expect(estimate).to_contain_text("48 h")
    expect(estimate).to_contain_text("Budget left in")
    assert page.locator("#id_lease_hours").get_attribute("max") == "48"
    assert page.locator("#id_count").get_attribute("max") == "4"

    page.fill("#id_count", "3")
    expect(estimate).to_contain_text("3 × g5.xlarge")
    expect(estimate).to_contain_text("1 after this order")

    page.fill("#id_count", "999")
    expect(estimate).to_contain_text("Not a valid order yet")
    expect(estimate).to_contain_text("Choose between 1 and 8 hosts.")
    expect(estimate.locator('[data-estimate="per_lease"]')).to_have_count(0)

    page.fill("#id_count", "2")
    page.fill("#id_lease_hours", "200")
    expect(estimate).to_contain_text("A lease can last at most 48 hours in this project.")
    assert not Order.objects.exists()


def test_errors_are_said_at_the_field_and_the_first_one_has_the_cursor(
    page, sign_in, alice, limits
):
    sign_in("alice")
    page.goto("/catalog/g5.xlarge/order/")
    page.fill("#id_count", "0")
    page.fill("#id_lease_hours", "72")
    page.fill("#id_ssh_public_key", ED25519)
    page.get_by_role("button", name="Place order").click()

    count = page.locator("#id_count")
    expect(count).to_be_focused()
    expect(count).to_have_attribute("aria-invalid", "true")
    expect(count).to_have_attribute("aria-describedby", "id_count-error")
    expect(count).to_have_value("0")
    expect(page.locator("#id_count-error")).to_have_text("Choose between 1 and 8 hosts.")
    expect(page.locator("#id_lease_hours")).to_have_value("72")
    expect(page.locator("#id_ssh_public_key")).to_have_value(ED25519)
    expect(page.locator(".alert-error")).to_contain_text("The order was not placed")
    assert "Ensure this value" not in page.content()
    assert not Order.objects.exists()


def test_creating_a_token_redirects_and_a_reload_creates_no_second_one(page, sign_in, alice):
    sign_in("alice")
    page.goto("/account/tokens/")
    page.fill("#id_name", "laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_contain_text("gpp_")
    expect(page.locator(".flash")).to_contain_text("Created the token laptop.")
    assert page.url.endswith("/account/tokens/")

    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)
    assert ApiToken.objects.filter(user=alice).count() == 1

    page.fill("#id_name", "")
    page.get_by_role("button", name="Create token").click()
    name = page.locator("#id_name")
    expect(name).to_be_focused()
    expect(name).to_have_attribute("aria-describedby", "id_name-error")
    expect(page.locator("#id_name-error")).to_contain_text("Name the token")
    assert ApiToken.objects.filter(user=alice).count() == 1
