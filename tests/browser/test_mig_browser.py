"""Alice orders two MIG slices of a p4d in the browser: the order page prices a slice-hour and
counts sevenths of a GPU, the slice's page shows its device, its shared host and its own SSH
login, and Ada (an admin) reads on the shared host's page which slice is whose."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from instances import tasks
from instances.models import Instance
from instances.services.mig import mig_host_follow
from tests.browser.conftest import keep_screenshot
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_orders_slices_and_ada_reads_the_shared_hosts_layout(
    page, sign_in, alice, ada, catalog, settings
):
    settings.PORTAL_SIMULATED_AGENTS = True
    sign_in("alice")
    page.goto("/catalog/p4d.24xlarge/order/")
    page.select_option("#id_mig_profile", "3g.20gb")
    page.fill("#id_count", "2")
    estimate = page.locator("#estimate")
    # 3/7 of one of eight A100s at $32.7726/h: $1.76 a slice-hour; 2 slices for the 24-hour
    # lease are 20 4/7 GPU-hours.
    expect(estimate).to_contain_text("2 × 3g.20gb slices of p4d.24xlarge")
    expect(estimate).to_contain_text("$1.76 per 3g.20gb slice-hour · 20 4/7 GPU-hours")
    page.fill("#id_ssh_public_key", ED25519)
    keep_screenshot(page, "mig-order")
    page.get_by_role("button", name="Place order").click()
    expect(page.locator(".flash")).to_contain_text("2× 3g.20gb slices of p4d.24xlarge")

    slices = list(Instance.objects.filter(order__mig_host=False).order_by("created_at", "id"))
    for record in slices:
        tasks.provision_instance.apply(args=[str(record.pk)])
    host = Instance.objects.get(order__mig_host=True)
    tasks.provision_instance.apply(args=[str(host.pk)])
    mig_host_follow(host_id=host.pk)
    mine = Instance.objects.get(pk=slices[0].pk)
    page.goto(f"/hosts/{mine.pk}/")
    card = page.get_by_test_id("mig")
    expect(card.get_by_role("heading")).to_have_text("MIG slice 3g.20gb")
    expect(card.get_by_test_id("mig-device")).to_have_text(mine.held_slot.device_uuid)
    expect(card.get_by_role("link", name=host.name)).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)
    # Its own SSH login (the shared host's server, her key forced into her slice's sandbox).
    expect(page.locator("#ssh-cmd")).to_have_text(mine.slice_login)
    expect(page.get_by_test_id("slice-session")).to_contain_text("your slice's own")
    expect(page.get_by_text("Or forward it over SSH")).to_have_count(0)
    keep_screenshot(page, "mig-slice")

    page.context.clear_cookies()
    sign_in("ada")
    page.goto(f"/hosts/{host.pk}/")
    layout = page.get_by_test_id("mig")
    expect(layout.get_by_role("heading")).to_have_text(
        "Shared MIG host: 2 of 16 3g.20gb slices in use"
    )
    rows = layout.locator("tbody tr")
    expect(rows).to_have_count(16)
    expect(rows.filter(has_text="alice")).to_have_count(2)
    keep_screenshot(page, "mig-shared-host")


def test_ada_puts_two_labs_in_the_portals_pool_and_alice_sees_where_her_slice_lives(
    page, sign_in, alice, carol, ada, projects, place_order, catalog, settings
):
    settings.PORTAL_SIMULATED_AGENTS = True
    sign_in("ada")
    for slug in ("vision-lab", "nlp-lab"):
        page.goto(f"/projects/{slug}/")
        page.select_option("#id_mig_pool", "portal")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_test_id("isolation")).to_contain_text("The portal's shared pool")
    keep_screenshot(page, "mig-pool-project")
    records = [
        place_order(
            user,
            project=projects[slug],
            instance_type=catalog["p4d.24xlarge"],
            mig_profile="1g.5gb",
        ).instances.get()
        for user, slug in ((alice, "vision-lab"), (carol, "nlp-lab"))
    ]
    for record in records:
        tasks.provision_instance.apply(args=[str(record.pk)])
    host = Instance.objects.get(order__mig_host=True)  # one host for both labs
    tasks.provision_instance.apply(args=[str(host.pk)])
    mig_host_follow(host_id=host.pk)
    page.context.clear_cookies()
    sign_in("alice")
    page.goto(f"/hosts/{records[0].pk}/")
    card = page.get_by_test_id("mig")
    expect(card).to_contain_text("the portal's shared pool, with other projects' slices")
    expect(card).to_contain_text(host.name)
    expect(card.get_by_role("link", name=host.name)).to_have_count(0)
    keep_screenshot(page, "mig-pool-slice")

    # Ada reads the pool's host: the portal's, launched for alice's slice, with no lease and no
    # idle stop, and its order on the hosts list says the same.
    page.context.clear_cookies()
    sign_in("ada")
    page.goto(f"/hosts/{host.pk}/")
    expect(page.locator("#host-panel")).to_contain_text(
        "the portal's shared pool · launched for a slice of alice's (vision-lab)"
    )
    expect(page.get_by_test_id("idle-stop")).to_contain_text(
        "never: a shared MIG host ends once no slice has used it for"
    )
    expect(page.get_by_test_id("isolation")).to_contain_text(
        "the portal's defaults, as every host of its shared pool"
    )
    keep_screenshot(page, "mig-pool-host")
    page.goto("/hosts/?scope=projects")
    group = page.locator(f"#order-{host.order_id}")
    expect(group.get_by_role("heading")).to_contain_text("Shared MIG host")
    expect(group).to_contain_text("no lease: it ends once no slice uses it")
    expect(group).not_to_contain_text("lease ends")
    expect(group.locator("td[data-label=Owner]")).to_have_text("shared")
    expect(group.locator("td[data-label='Cost so far']")).to_have_text("billed through its slices")
    keep_screenshot(page, "mig-pool-hosts-list")
