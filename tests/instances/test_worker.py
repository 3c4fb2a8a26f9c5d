"""A real Celery worker process on Redis (not eager mode) brings five ordered hosts to running."""

from __future__ import annotations

import pytest

from instances.models import Instance, SimulatedHost
from tests.workers import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(worker_process):
    return worker_process(PORTAL_SIMULATED_BOOT_SECONDS="1")


def test_five_ordered_hosts_reach_running_through_a_real_worker(
    worker, api_as, alice, catalog, order_body
):
    response = api_as(alice).post("/api/v1/orders/", order_body(count=5), format="json")
    assert response.status_code == 201

    def all_running():
        """all five instances running"""
        statuses = list(Instance.objects.values_list("status", flat=True))
        return len(statuses) == 5 and set(statuses) == {"running"}

    wait_for(all_running, timeout=90)
    assert SimulatedHost.objects.exclude(state="terminated").count() == 5
    for instance in Instance.objects.all():
        assert list(instance.events.values_list("new_status", flat=True)) == [
            "requested",
            "provisioning",
            "running",
        ]
        assert instance.events.get(new_status="running").actor in {
            "system:provision",
            "system:sync",
        }
