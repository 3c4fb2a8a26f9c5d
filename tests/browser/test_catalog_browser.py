"""A researcher finds the H100 host in the catalog, in a real browser."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_filters_the_catalog_to_h100_and_sees_p5_with_its_price(
    page, sign_in, alice, catalog
):
    sign_in("alice")
    page.goto("/catalog/")
    expect(page.locator("article.host")).to_have_count(len(catalog))
    page.get_by_label("H100", exact=True).check()  # the form submits itself on change
    page.wait_for_url("**gpu_model=H100**")
    cards = page.locator("article.host")
    expect(cards).to_have_count(1)
    card = cards.first
    expect(card.locator(".host-name")).to_have_text("p5.48xlarge")
    expect(card.locator(".price .amount")).to_have_text("$98.32")
    expect(card).to_contain_text("$12.29 per GPU-hour")
    expect(card).to_contain_text("TF 2.20.0")


def test_a_bad_price_filter_shows_what_to_fix(page, sign_in, alice, catalog):
    sign_in("alice")
    page.goto("/catalog/")
    page.fill("#f-price", "-5")
    page.click("button:has-text('Apply')")
    expect(page.locator(".alert-error")).to_contain_text("max_price: Must be 0 or more")
