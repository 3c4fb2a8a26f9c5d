"""Alice orders a spot host that relaunches on spot; the cloud warns and takes it back, and her
host page shows the warning, the replacement and the link between them without a reload."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from instances.models import Instance
from tests.browser.conftest import keep_screenshot
from tests.conftest import ED25519

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LEAD = 15


@pytest.fixture
def worker(live_server, worker_process, settings, tmp_path):
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = LEAD
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    return worker_process(
        beat=True,
        PORTAL_SIMULATED_BOOT_SECONDS="2",
        PORTAL_SPOT_WARNING_LEAD_SECONDS=str(LEAD),
        PORTAL_SPOT_EVENTS_SECONDS="2",
        PORTAL_RECONCILE_SECONDS="3",
        PORTAL_SPOT_EVENTS_QUEUE_URL="",
        PORTAL_CHECKPOINT_LOCAL_DIR=str(tmp_path / "checkpoints"),
    )


def test_the_host_page_shows_the_warning_the_replacement_and_the_link_without_a_reload(
    page, sign_in, alice, catalog, worker
):
    sign_in("alice")
    page.goto("/catalog/g5.xlarge/order/?market=spot")
    page.fill("#id_ssh_public_key", ED25519)
    page.select_option("#id_interruption_policy", "relaunch_spot")
    page.get_by_role("button", name="Place order").click()
    expect(page.locator(".flash")).to_contain_text("Ordered 1× g5.xlarge (Spot)")
    original = Instance.objects.get()
    page.goto(f"/hosts/{original.pk}/")
    panel = page.locator("#host-panel")
    expect(panel.locator("h1 .status")).to_have_text("Running", timeout=30_000)
    checkpoint = panel.get_by_test_id("checkpoint")
    expect(checkpoint).to_contain_text("tf.keras.callbacks.BackupAndRestore(backup_dir=")
    expect(checkpoint).to_contain_text(f"/vision-lab/{original.order_id}/")
    page.evaluate("window.stillTheSamePage = true")

    call_command("simulated_cloud", "warn", str(original.pk), stdout=io.StringIO())
    expect(panel.get_by_test_id("spot-warning")).to_contain_text(
        "takes this spot host back at", timeout=20_000
    )
    links = panel.get_by_test_id("replacement-links")
    expect(links).to_contain_text("Replaced by", timeout=20_000)
    expect(links.locator(".status")).to_have_text("Running", timeout=30_000)
    keep_screenshot(page, "spot-recovery-warned")
    # Then the cloud takes the original; the replacement already runs.
    expect(panel.locator("h1 .status")).to_have_text("Terminated", timeout=LEAD * 1000 + 20_000)
    expect(panel.locator(".timeline")).to_contain_text("interruption warning")
    assert page.evaluate("window.stillTheSamePage") is True

    replacement = Instance.objects.get(replaces=original)
    links.get_by_role("link").click()
    expect(page).to_have_url(f"{page.url.split('/hosts/')[0]}/hosts/{replacement.pk}/")
    expect(page.get_by_test_id("replacement-links")).to_contain_text("Replaces")
    expect(page.locator("#host-panel h1 .status")).to_have_text("Running")
