"""A host with several GPUs shows each one: a utilization line per GPU beside the host's
chart, named in its legend, and a table of each GPU's newest minute; a one-GPU host shows
only its own chart. Browser tests run on the real clock: the readings are written at their
minutes, as an agent catching up would post them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from instances import services
from instances.providers.base import GpuValue
from tests.browser.conftest import keep_screenshot
from tests.browser.test_accessibility_browser import AXE, axe_violations
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
A100_MIB = 40 * 1024

# Four busy GPUs, two half busy, one idle, one loading data: a day a researcher would debug.
LOAD = {0: 92, 1: 90, 2: 88, 3: 91, 4: 45, 5: 50, 6: 0, 7: 20}


def gpu_minutes(host, minutes: int) -> None:
    now = timezone.now()
    readings = []
    for ago in range(minutes, 0, -1):
        gpus = tuple(
            GpuValue(index, max(0, busy - ago % 7), 1_000 * (index + 1), A100_MIB)
            for index, busy in LOAD.items()
        )
        busy = sum(gpu.utilization for gpu in gpus)
        readings.append(
            services.Reading(
                str(host.pk),
                now - timedelta(minutes=ago),
                round(busy / len(gpus)),
                sum(gpu.memory_used_mib for gpu in gpus),
                gpus=gpus,
            )
        )
    assert services.readings_ingest(readings).stored == minutes


def chart_labels(page, canvas: str) -> list[str]:
    return page.evaluate(
        "(id) => Chart.getChart(document.getElementById(id)).data.datasets.map((d) => d.label)",
        canvas,
    )


def test_an_eight_gpu_host_shows_a_line_and_a_row_for_each_gpu(
    page, sign_in, alice, catalog, running_host
):
    host = running_host(instance_type=catalog["p4d.24xlarge"])
    gpu_minutes(host, 45)
    sign_in("alice")
    page.goto(f"/hosts/{host.pk}/")
    expect(page.locator("#gpu-each-chart")).to_have_attribute("data-ready", "true")
    expect(page.locator("#gpu-each")).to_be_visible()
    assert chart_labels(page, "gpu-each-chart") == [f"GPU {n}" for n in range(8)]
    lines = page.evaluate(
        "() => Chart.getChart(document.getElementById('gpu-each-chart'))"
        ".data.datasets.map((d) => d.data.length)"
    )
    assert lines == [45] * 8  # a point for each minute, aligned with the host's chart

    table = page.get_by_test_id("gpus-now")
    expect(table.locator("tbody tr")).to_have_count(8)
    expect(table.locator('tr[data-gpu="6"]')).to_contain_text("0 %")
    expect(table.locator('tr[data-gpu="0"]')).to_contain_text("91 %")  # the newest minute
    expect(table.locator('tr[data-gpu="7"]')).to_contain_text("7.8 of 40.0 GiB")
    keep_screenshot(page, "host-eight-gpus")


def test_a_one_gpu_host_has_no_per_gpu_chart_or_table(page, sign_in, alice, running_host):
    host = running_host()  # g5.xlarge: one A10G
    now = timezone.now()
    services.readings_ingest(
        [
            services.Reading(
                str(host.pk),
                now - timedelta(minutes=ago),
                60,
                9_000,
                gpus=(GpuValue(0, 60, 9_000, 23_028),),
            )
            for ago in range(10, 0, -1)
        ]
    )
    sign_in("alice")
    page.goto(f"/hosts/{host.pk}/")
    expect(page.locator("#gpu-chart")).to_have_attribute("data-ready", "true")
    expect(page.locator("#gpu-each")).to_have_count(0)
    expect(page.get_by_test_id("gpus-now")).to_have_count(0)


def test_the_eight_gpu_host_page_passes_axe(new_context, alice, catalog, running_host):
    host = running_host(instance_type=catalog["p4d.24xlarge"])
    gpu_minutes(host, 20)
    page = new_context(bypass_csp=True).new_page()
    page.goto("/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/dashboard/**")
    for viewport in ({"width": 1440, "height": 900}, {"width": 390, "height": 844}):
        page.set_viewport_size(viewport)
        page.goto(f"/hosts/{host.pk}/")
        expect(page.locator("#gpu-each-chart")).to_have_attribute("data-ready", "true")
        assert AXE.exists(), f"axe-core is missing at {AXE}: run npm ci"
        assert axe_violations(page, f"/hosts/{host.pk}/ at {viewport['width']} px") == []
