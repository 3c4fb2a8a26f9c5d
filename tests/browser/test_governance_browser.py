"""ada sets a quota and an approval policy; alice is refused; bob's order waits; ada approves."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from instances.models import Instance, Order
from tests.browser.conftest import answer_confirmation, keep_screenshot
from tests.conftest import ED25519, PASSWORD
from tests.workers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def as_user(new_context):
    """A fresh browser context per persona, signed in."""

    def open_as(username: str):
        page = new_context().new_page()
        page.set_default_timeout(15_000)
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/dashboard/**")
        return page

    return open_as


def order(page, type_name: str, count: int):
    page.goto(f"/catalog/{type_name}/order/")
    page.fill("#id_count", str(count))
    page.fill("#id_ssh_public_key", ED25519)
    page.get_by_role("button", name="Place order").click()


def test_quota_refusal_then_an_approved_order_provisions(
    as_user, alice, bob, ada, catalog, worker_process
):
    worker_process(PORTAL_SIMULATED_BOOT_SECONDS="1")

    admin = as_user("ada")
    admin.get_by_role("link", name="Quotas").click()
    card = admin.locator('[data-project="vision-lab"]')
    card.get_by_label("GPUs in total").fill("8")
    card.get_by_role("button", name="Save limits of vision-lab").click()
    expect(card.locator(".flash")).to_contain_text("Saved the quota of Vision Lab")
    expect(card.locator('[data-quota="GPUs"]')).to_contain_text("0 / 8")

    researcher = as_user("alice")
    researcher.goto("/catalog/p4d.24xlarge/order/")
    researcher.fill("#id_count", "2")
    # Said before submit, and Place order stays disabled with the reason.
    refusal = "Quota exceeded: vision-lab may run 8 GPUs; 0 are in use and this order asks for 16."
    expect(researcher.locator('[data-estimate="refusal"]')).to_contain_text(refusal)
    expect(researcher.get_by_role("button", name="Place order")).to_be_disabled()
    expect(researcher.locator('[data-estimate="blocked"]')).to_contain_text(refusal)
    assert not Order.objects.exists()
    # The way to ask for more lands with ada, on her Quotas page.
    researcher.get_by_role("link", name="Request more quota").click()
    # Prefilled with what the order lacks: 16 asked, 8 allowed.
    expect(researcher.get_by_label("More GPUs")).to_have_value("8")
    researcher.get_by_label("What they are for").fill("a two-host sweep")
    researcher.get_by_role("button", name="Send to the admins").click()
    expect(researcher.locator(".flash")).to_contain_text("Asked the admins for 8 more GPUs")
    admin.reload()
    asks = admin.locator('[data-project="vision-lab"] [data-testid="quota-requests"]')
    expect(asks).to_contain_text("alice asks for 8 more GPUs")
    expect(asks.get_by_role("button", name="Grant: raise to 16 GPUs")).to_be_visible()
    asks.get_by_role("button", name="Decline").click()
    expect(admin.locator(".flash")).to_contain_text("Declined alice's request for 8 GPUs")

    card = admin.locator('[data-project="vision-lab"]')
    card.get_by_label("Require approval above (GPUs)").fill("2")
    card.get_by_role("button", name="Save policy").click()
    expect(card.locator(".flash")).to_contain_text("Saved the approval policy of Vision Lab")

    other = as_user("bob")
    order(other, "g5.xlarge", 3)
    expect(other.locator(".flash")).to_contain_text("waits for approval")
    expect(other.locator("body")).to_contain_text("Waiting for approval")
    waiting = Order.objects.get()
    assert waiting.status == "pending_approval" and not waiting.instances.exists()

    admin.get_by_role("link", name="Approvals").click()
    item = admin.locator(f'[data-order="{waiting.pk}"]')
    expect(item).to_contain_text("3× g5.xlarge")
    expect(item).to_contain_text("3 GPUs is more than the 2 vision-lab allows")
    item.get_by_role("button", name="Approve").click()
    # It asks first, naming the order and what its lease will cost; Cancel leaves it held.
    answer_confirmation(admin, accept=False, says="Approve 3× g5.xlarge for bob in vision-lab?")
    assert Order.objects.get().status == "pending_approval"
    item.get_by_role("button", name="Approve").click()
    answer_confirmation(admin, says="over the")
    expect(admin.locator(".flash")).to_contain_text("Approved 3× g5.xlarge for bob")

    def running():
        """bob's three hosts running"""
        return Instance.objects.filter(order=waiting, status="running").count() == 3

    wait_for(running, timeout=60)
    other.goto("/hosts/")
    expect(other.locator("#host-rows tr[data-host] .status")).to_have_text(["Running"] * 3)
    other.goto("/dashboard/")
    expect(other.locator(".notices")).to_contain_text("Approved: 3× g5.xlarge for vision-lab")
    expect(other.locator('[data-project="vision-lab"] [data-quota="GPUs"]')).to_contain_text(
        "3 / 8"
    )
    keep_screenshot(other, "governance-bob-dashboard")
    admin.goto("/quotas/")
    keep_screenshot(admin, "governance-ada-quotas")
