"""My hosts at scale: hosts grouped by order with a running total, bulk stop and terminate
after one confirmation that names the hosts, Terminate in a row's menu, the order just placed
highlighted (not filtered to), a host page titled by the host's name and type; and the cost
chart's axis when the spend is under a dollar."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.services.metering import usage_meter
from billing.services.rollups import rollups_refresh
from instances.models import Instance
from tests.browser.conftest import answer_confirmation, keep_screenshot
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def provisioned(order) -> list[Instance]:
    from instances import services

    return [services.instance_provision(instance_id=i.pk) for i in order.instances.order_by("id")]


@pytest.fixture
def hosts(place_order, alice):
    """alice's three running on-demand g5.xlarge hosts ($1.006/h each), from two orders."""
    first = provisioned(place_order(alice))[0]
    pair = provisioned(place_order(alice, count=2))
    return {"first": first, "pair": pair}


@pytest.mark.parametrize("width", [1440, 390])
def test_hosts_are_grouped_by_order_with_a_running_total(page, sign_in, hosts, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in("alice")
    page.goto("/hosts/")
    expect(page.locator(".order-group")).to_have_count(2)
    # Three hosts at $1.006/h: $3.018/h in all, shown to the cent.
    expect(page.get_by_test_id("hosts-total")).to_have_text("3 hosts · 3 running at $3.02/h")
    pair = page.locator(f'.order-group[data-order="{hosts["pair"][0].order_id}"]')
    expect(pair.locator("tr[data-host]")).to_have_count(2)
    expect(pair.locator(".order-group-total")).to_have_text("2 hosts · $2.01/h")
    # No red Terminate button on the rows: it waits in each row's menu; Stop stays at hand.
    row = page.locator(f'tr[data-host="{hosts["first"].pk}"]')
    expect(row.get_by_role("button", name="Stop")).to_be_visible()
    expect(row.get_by_role("button", name="Terminate")).to_be_hidden()
    row.locator("summary", has_text="More").click()
    expect(row.get_by_role("button", name="Terminate")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_bulk_terminate_asks_once_naming_the_hosts(page, sign_in, hosts):
    sign_in("alice")
    page.goto("/hosts/")
    terminate = page.get_by_role("button", name="Terminate selected")
    expect(terminate).to_be_disabled()  # nothing ticked yet
    pair = hosts["pair"]
    # The order's own box ticks both of its hosts.
    page.locator(f'input[data-select-group="{pair[0].order_id}"]').check()
    expect(page.locator("[data-bulk-count]")).to_have_text("2 selected")
    # A poll of the rows keeps what is ticked.
    with page.expect_response(lambda response: "/hosts/rows/" in response.url):
        pass
    expect(page.locator(f"#pick-{pair[1].pk}")).to_be_checked()

    terminate.click()
    dialog = page.locator("dialog.confirm-dialog[open]")
    expect(dialog.locator(".confirm-title")).to_have_text("Terminate 2 hosts?")
    keep_screenshot(page, "bulk_terminate_dialog", full_page=False)
    for host in pair:
        expect(dialog.locator(".confirm-list")).to_contain_text(f"{host.name} · g5.xlarge")
    answer_confirmation(page, accept=False)
    assert not Instance.objects.filter(status="terminating").exists()

    terminate.click()
    answer_confirmation(page, says="this cannot be undone")
    names = ", ".join(sorted(host.name for host in pair))
    expect(page.locator(".flash")).to_contain_text(f"Terminate requested for 2 hosts: {names}.")
    statuses = dict(Instance.objects.values_list("pk", "status"))
    assert [statuses[host.pk] for host in pair] == ["terminating", "terminating"]
    assert statuses[hosts["first"].pk] == "running"
    # Each host went through the one action service: its own event, by alice.
    for host in pair:
        assert host.events.filter(new_status="terminating", actor="user:alice").count() == 1


def test_bulk_stop_names_the_hosts_it_could_not_stop(page, sign_in, hosts, place_order, alice):
    spot = provisioned(place_order(alice, market="spot"))[0]
    sign_in("alice")
    page.goto("/hosts/")
    page.locator(f"#pick-{spot.pk}").check()
    page.locator(f"#pick-{hosts['first'].pk}").check()
    page.get_by_role("button", name="Stop selected").click()
    answer_confirmation(page, says="Stop 2 hosts?")
    flash = page.locator(".flash")
    expect(flash).to_contain_text(f"Stop requested for 1 host: {hosts['first'].name}.")
    expect(flash).to_contain_text(f"{spot.name} (g5.xlarge): Spot hosts cannot be stopped")


def test_a_row_action_asks_in_the_dialog_naming_the_host(page, sign_in, hosts):
    host = hosts["first"]
    sign_in("alice")
    page.goto("/hosts/")
    row = page.locator(f'tr[data-host="{host.pk}"]')
    row.get_by_role("button", name="Stop").click()
    answer_confirmation(page, accept=False, says=f"Stop {host.name} (g5.xlarge)?")
    expect(row.locator(".status")).to_have_text("Running")
    row.get_by_role("button", name="Stop").click()
    answer_confirmation(page, says="you pay only for the disk")
    expect(row.locator(".status")).to_have_text("Stopping")


def test_a_placed_order_lands_on_my_hosts_with_its_hosts_highlighted(page, sign_in, hosts):
    sign_in("alice")
    page.goto("/catalog/g5.xlarge/order/")
    page.fill("#id_count", "2")
    page.fill("#id_ssh_public_key", ED25519)
    page.get_by_role("button", name="Place order").click()
    page.wait_for_url("**/hosts/?new=*")
    new = page.locator(".order-group.is-new")
    expect(new).to_have_count(1)
    expect(new.locator("tr[data-host]")).to_have_count(2)
    expect(new).to_contain_text("Just ordered")
    # The other orders' hosts are still listed, not filtered away.
    expect(page.locator(".order-group")).to_have_count(3)
    expect(page.locator("tr[data-host]")).to_have_count(5)


def test_the_host_page_is_titled_by_its_name_and_type(page, sign_in, hosts):
    host = hosts["first"]
    sign_in("alice")
    page.goto(f"/hosts/{host.pk}/")
    assert page.title() == f"{host.name} · g5.xlarge · GPU Portal"
    expect(page.locator("h1")).to_contain_text(f"{host.name} g5.xlarge")
    expect(page.locator(".crumbs")).not_to_contain_text(str(host.pk))
    page.get_by_role("button", name="Terminate").click()
    answer_confirmation(page, says=f"Terminate {host.name} (g5.xlarge)?")
    expect(page.locator(".connect")).not_to_contain_text("appears here once the host is running")
    expect(page.locator(".connect")).to_contain_text("nothing to connect to")


def test_the_cost_axis_reads_cents_when_the_spend_is_under_a_dollar(page, sign_in, hosts):
    usage_meter(now=timezone.now() + timedelta(minutes=10))  # 3 hosts x 10 min: about $0.50
    rollups_refresh()
    sign_in("alice")
    page.goto("/costs/")
    expect(page.locator("#spend-chart")).to_have_attribute("data-ready", "true")
    labels = page.evaluate("window.portalSpendChart.scales.y.ticks.map((tick) => tick.label)")
    assert len(labels) > 2 and len(set(labels)) == len(labels), labels
    assert all(label.startswith("$0.") for label in labels[1:-1]), labels
