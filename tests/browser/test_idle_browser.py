"""alice's host went idle: its page shows the GPU chart and the warning, Keep running holds it,
and My hosts shows the current reading; a manager sets the project's idle stop."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from instances import services
from instances.models import IdlePolicy
from instances.providers.gpu_profile import profile_of
from instances.providers.simulated import SimulatedProvider
from tests.browser.conftest import keep_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def idle_host(running_host, projects):
    """A host idle for the last 40 minutes (browser tests run on the real clock: the readings
    are written at their minutes, as an agent catching up would post them)."""
    IdlePolicy.objects.create(
        project=projects["vision-lab"],
        threshold_percent=10,
        idle_minutes=30,
        warning_minutes=5,
        snooze_hours=2,
    )
    host = running_host()
    SimulatedProvider().set_gpu_profile(host.cloud_id, profile_of("idle", now=timezone.now()))
    now = timezone.now()
    services.readings_ingest(
        [
            services.Reading(str(host.pk), now - timedelta(minutes=m), 2, 9000)
            for m in range(40, 0, -1)
        ]
    )
    services.telemetry_collect()
    assert services.idle_check().warned == [str(host.pk)]
    return host


def test_alice_sees_her_idle_host_and_keeps_it_running(page, sign_in, alice, idle_host):
    sign_in("alice")
    page.goto(f"/hosts/{idle_host.pk}/")
    warning = page.locator("#keep-running")
    expect(warning).to_contain_text("it will be stopped at")
    expect(page.locator("#gpu-chart")).to_have_attribute("data-ready", "true")
    keep_screenshot(page, "idle-host-warned")
    page.get_by_role("button", name="Keep running (2 h)").click()
    expect(page.locator("#keep-running")).to_contain_text("Kept running: no idle stop before")
    expect(page.locator(".timeline")).to_contain_text("Keep running")
    page.goto("/hosts/")
    expect(page.locator(f'tr[data-host="{idle_host.pk}"]')).to_contain_text(" %")


def test_ada_sets_vision_labs_idle_stop(page, sign_in, ada, projects):
    sign_in("ada")
    page.goto("/projects/vision-lab/idle-policy/")
    page.get_by_label("Stop idle hosts").check()
    page.get_by_label("Idle for (minutes)").fill("45")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".flash")).to_contain_text("Saved the idle stop of vision-lab")
    assert IdlePolicy.objects.get(project=projects["vision-lab"]).idle_minutes == 45
