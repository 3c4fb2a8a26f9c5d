"""Alice orders a spot host from the catalog, watches it run, connects, and terminates it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from instances.models import Instance
from tests.browser.conftest import answer_confirmation
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(live_server, worker_process):
    return worker_process(PORTAL_SIMULATED_BOOT_SECONDS="2")


def test_alice_orders_a_g5_spot_host_watches_it_run_and_terminates_it(
    page, sign_in, alice, catalog, worker
):
    sign_in("alice")
    page.goto("/catalog/")
    card = page.locator('article[data-type="g5.xlarge"]')
    card.get_by_role("link", name="Order spot").click()
    expect(page.get_by_role("heading", name="Order g5.xlarge")).to_be_visible()
    expect(page.locator("#estimate")).to_contain_text("spot")
    page.fill("#id_ssh_public_key", ED25519)
    page.get_by_role("button", name="Place order").click()

    expect(page.locator(".flash")).to_contain_text("Ordered 1× g5.xlarge (Spot)")
    row = page.locator("#host-rows tr[data-host]")
    expect(row).to_have_count(1)
    # htmx polls the rows: the status moves on without a page load.
    expect(row.locator(".status")).to_have_text("Running", timeout=30_000)
    instance = Instance.objects.get()
    expect(row.locator("code.ssh")).to_have_text(f"ssh ubuntu@{instance.public_ip}")

    # Terminate sits in the row's menu and asks in the portal's dialog, naming the host.
    row.locator("summary", has_text="More").click()
    row.get_by_role("button", name="Terminate").click()
    answer_confirmation(page, says=f"Terminate {instance.name} (g5.xlarge)?")
    expect(row.locator(".status")).to_have_text(re.compile("Terminat(ing|ed)"))
    expect(row.locator(".status")).to_have_text("Terminated", timeout=30_000)
    instance.refresh_from_db()
    assert instance.status == "terminated"
    assert list(instance.events.values_list("new_status", flat=True))[-2:] == [
        "terminating",
        "terminated",
    ]
