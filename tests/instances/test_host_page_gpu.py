"""The host page's GPU: the reading now (running hosts only, memory against the host's total)
and a chart near the top titled by the span it really shows."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from instances import services
from instances.models import GpuReading, Instance

pytestmark = pytest.mark.django_db
MINUTE = timedelta(minutes=1)


def readings(host, *, minutes: int, utilization: int = 94, memory_used_mib: int = 20_000):
    """``minutes`` readings ending at the current minute, as the agent posts them."""
    from django.utils import timezone

    now = timezone.now().replace(second=0, microsecond=0)
    GpuReading.objects.bulk_create(
        GpuReading(
            instance=host,
            minute=now - n * MINUTE,
            utilization=utilization,
            memory_used_mib=memory_used_mib,
        )
        for n in range(minutes)
    )


def gpu_now(page: str) -> str:
    cell = re.search(r'data-testid="gpu-now">(.*?)</dd>', page, re.S).group(1)
    return re.sub(r"<[^>]+>", "", cell).strip()


def test_gpu_now_shows_memory_in_gib_of_the_hosts_total(clock, client, running_host, alice):
    host = running_host()  # g5.xlarge: one A10G of 24 GiB
    readings(host, minutes=1, memory_used_mib=20_480)
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert gpu_now(page) == "94 % · 20 of 24 GiB"


def test_a_terminated_host_has_no_gpu_now_even_with_a_fresh_last_minute(
    clock, client, api_as, running_host, alice
):
    host = running_host()
    readings(host, minutes=1)
    services.instance_transition(
        instance=host, to=Instance.Status.TERMINATING, reason="test", actor="alice"
    )
    services.instance_transition(
        instance=host, to=Instance.Status.TERMINATED, reason="test", actor="alice"
    )
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert gpu_now(page) == "— (terminated)"
    assert "94 %" not in client.get("/hosts/rows/?status=all").content.decode()
    assert api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()["gpu_utilization"] is None


def test_the_chart_of_a_new_host_says_since_when_not_last_24_h(clock, client, running_host, alice):
    host = running_host()
    readings(host, minutes=10)
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    title = re.search(r'data-testid="gpu-card">\s*<h2>(.*?)</h2>', page, re.S).group(1)
    assert "last 24 h" not in title
    assert title.startswith("GPU utilization and memory, since ")
    assert "(9\xa0minutes)" in title


def test_the_chart_of_a_host_with_a_days_readings_says_last_24_h(
    clock, client, running_host, alice
):
    host = running_host()
    readings(host, minutes=24 * 60)
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "<h2>GPU utilization and memory, last 24 h</h2>" in page


def test_the_chart_sits_above_the_timeline_and_survives_the_panels_polls(
    clock, client, running_host, alice
):
    host = running_host()
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert page.index('id="gpu-chart"') < page.index("<h2>Timeline</h2>")
    assert 'id="gpu-chart-keep" hx-preserve' in page
    # The polled panel carries the same preserved element, so htmx keeps the drawn chart.
    panel = client.get(f"/hosts/{host.pk}/panel/").content.decode()
    assert 'id="gpu-chart-keep" hx-preserve' in panel
    assert 'data-memory-total-gib="24"' in panel


def test_an_ended_host_without_readings_says_so_without_an_empty_chart(
    clock, client, running_host, alice
):
    host = running_host()
    services.instance_transition(
        instance=host, to=Instance.Status.TERMINATING, reason="test", actor="alice"
    )
    services.instance_transition(
        instance=host, to=Instance.Status.TERMINATED, reason="test", actor="alice"
    )
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "No GPU readings in the last 24 h: this host is terminated." in page
    assert '<div class="gpu-chart-box" hidden>' in page
