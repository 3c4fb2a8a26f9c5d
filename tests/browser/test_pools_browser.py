"""alice creates a pool from the form, gives it a schedule (a bad cron is refused at the field),
and, when the clock passes the scheduled time and the autoscaler runs, watches her pool page
follow without a reload: desired, the hosts, the event with its reason, the chart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from instances import services
from instances.models import Pool
from tests.browser.conftest import answer_confirmation, keep_screenshot
from tests.conftest import ED25519
from tests.instances.pool_helpers import provision_all

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_pool_follows_its_schedule_on_its_page(page, sign_in, alice, catalog):
    sign_in("alice")
    page.get_by_role("link", name="Pools", exact=True).click()
    page.get_by_role("link", name="New pool").click()
    page.select_option("#id_project", "vision-lab")
    page.fill("#id_name", "nightly")
    page.select_option("#id_instance_type", "g5.xlarge")
    page.select_option("#id_image", "tf-2.17-cuda12.3")
    page.fill("#id_min_size", "0")
    page.fill("#id_desired", "0")
    page.fill("#id_max_size", "3")
    page.fill("#id_on_demand_base", "1")
    page.fill("#id_spot_percent", "0")
    page.fill("#id_ssh_public_key", ED25519)
    expect(page.get_by_test_id("pool-approval")).to_contain_text("No approval needed")
    keep_screenshot(page, "pool-new")
    page.get_by_role("button", name="Create pool").click()
    expect(page.locator(".flash")).to_contain_text("Pool nightly created")
    pool = Pool.objects.get(name="nightly")

    # A malformed cron is refused beside the field; the form stays open with what was typed.
    page.fill("#id_new_cron", "0 9 * *")
    page.fill("#id_new_timezone", "Europe/Berlin")
    page.fill("#id_new_desired", "2")
    page.get_by_role("button", name="Add", exact=True).click()
    expect(page.locator(".schedule-new .field-error")).to_contain_text("five fields")
    expect(page.locator("#id_new_timezone")).to_have_value("Europe/Berlin")
    page.fill("#id_new_cron", "0 9 * * *")
    page.get_by_role("button", name="Add", exact=True).click()
    schedule = page.locator(".schedule-list li").first
    expect(schedule).to_contain_text("At 09:00 (Europe/Berlin): desired 2")
    expect(schedule).to_contain_text("next:")

    panel = page.locator("#pool-panel")
    expect(panel.locator('[data-kpi="desired"]')).to_have_text("0")
    page.evaluate("window.stillTheSamePage = true")

    # The clock passes the next 09:00 in Berlin: the autoscaler's pass fires the schedule and
    # launches two hosts; the cloud boots them.
    fires_at = services.schedule_next_runs(pool.schedules.get(), count=1)[0]
    report = services.autoscale(now=fires_at + timedelta(minutes=1))
    assert report is not None
    expect(panel.locator('[data-kpi="desired"]')).to_have_text("2", timeout=15_000)
    provision_all()
    expect(panel.locator('[data-kpi="running"]')).to_have_text("2", timeout=15_000)
    activity = page.locator("#pool-activity")
    expect(activity.locator(".pool-events")).to_contain_text("At 09:00 (Europe/Berlin)")
    expect(activity.locator(".pool-hosts tbody tr")).to_have_count(2)
    expect(activity.locator(".pool-hosts .status").first).to_have_text("Running")
    assert page.evaluate("window.stillTheSamePage") is True

    # Set by hand: one host; the next pass ends the other.
    page.fill("#id_set_desired", "1")
    page.get_by_role("button", name="Set", exact=True).click()
    expect(page.locator(".flash")).to_contain_text("Desired is now 1")
    services.autoscale(now=fires_at + timedelta(minutes=2))
    expect(page.locator('#pool-panel [data-kpi="running"]')).to_have_text("1", timeout=15_000)
    page.reload()
    expect(page.locator("#pool-chart")).to_have_attribute("data-ready", "true")
    keep_screenshot(page, "pool-page")

    # Deleting asks first, naming the pool.
    page.get_by_role("button", name="Delete pool nightly").click()
    answer_confirmation(page, says="Delete pool nightly in vision-lab?")
    expect(page.locator(".flash")).to_contain_text("Pool nightly is being deleted")
    assert Pool.objects.get(pk=pool.pk).status == Pool.Status.DELETING
