"""Alice extends her host's lease from its page, is told when the limit refuses more, and
cancels an order that waits for approval from My hosts."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from instances.models import Order
from instances.services import approval_policy_set
from tests.browser.conftest import answer_confirmation, keep_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_extends_her_hosts_lease_and_hears_the_limit(page, sign_in, alice, running_host):
    host = running_host(lease_hours=8)
    sign_in("alice")
    page.goto(f"/hosts/{host.pk}/")
    form = page.locator("form.extend-lease")
    form.locator("input[name=hours]").fill("3")
    form.get_by_role("button", name="Extend").click()
    expect(page.locator("#host-panel")).to_contain_text("11 h, 3 h added")
    expect(page.locator(".timeline")).to_contain_text("lease extended by 3 h by alice")
    page.locator("form.extend-lease input[name=hours]").fill("500")
    page.locator("form.extend-lease").get_by_role("button", name="Extend").click()
    expect(page.locator("#toast")).to_contain_text("Lease limit: the portal's longest lease is")
    host.refresh_from_db()
    assert host.lease_extended_hours == 3


def test_alice_cancels_her_held_order_from_my_hosts(
    page, sign_in, ada, alice, projects, place_order
):
    approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)
    order = place_order(alice, count=3)
    sign_in("alice")
    page.goto("/hosts/")
    held = page.locator(f'#held-orders tr[data-order="{order.pk}"]')
    expect(held).to_contain_text("3 GPUs is more than the 2 vision-lab allows without approval")
    expect(held).to_contain_text("ada")
    keep_screenshot(page, "my_hosts_with_a_held_order")
    held.get_by_role("button", name="Cancel order").click()
    answer_confirmation(page, says="Cancel the order for 3× g5.xlarge?")
    expect(page.locator(".flash")).to_contain_text("Cancelled the order for 3× g5.xlarge")
    expect(page.locator("#held-orders")).to_have_count(0)
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
