"""Chaos: SIGKILL the worker at random points of provisioning, twenty times.

However the worker dies, no instance row ever has more than one live host in the cloud, one
reconcile pass leaves no orphans, and every instance ends running or failed.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from django.db.models import Count

from instances import services
from instances.models import Instance, SimulatedHost
from tests.workers import Worker, purge_queues, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]
TRIALS = 20


def most_live_hosts_per_row() -> int:
    counts = (
        SimulatedHost.objects.exclude(state="terminated")
        .values("portal_instance")
        .annotate(n=Count("id"))
        .values_list("n", flat=True)
    )
    return max(counts, default=0)


@pytest.mark.real_clock  # real workers stamp rows with the wall clock (tests/clock.py)
def test_killing_the_worker_mid_provisioning_never_doubles_or_loses_a_host(
    place_order, alice, settings, capsys
):
    rng = random.Random(20261129)
    purge_queues()
    # Every cloud call takes 150 ms and a host boots in a second: wide windows to die in.
    env = {"PORTAL_SIMULATED_API_LATENCY_SECONDS": "0.15", "PORTAL_SIMULATED_BOOT_SECONDS": "1"}
    killed_in = Counter()
    worst = 0
    for _ in range(TRIALS):
        worker = Worker(**env).start()
        instance = place_order(alice).instances.get()  # committed: the task is on the broker
        time.sleep(rng.uniform(0.0, 1.6))
        instance.refresh_from_db()
        stage = instance.status + ("+host" if instance.cloud_id else "")
        worker.kill()
        killed_in[stage] += 1
        worst = max(worst, most_live_hosts_per_row())
        assert worst <= 1

    # A new worker, and one reconcile pass for whatever the dead ones left half done.
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 0
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 0
    settings.PORTAL_SIMULATED_API_LATENCY_SECONDS = 0.15
    settings.PORTAL_SIMULATED_BOOT_SECONDS = 1
    worker = Worker(**env).start()
    try:
        time.sleep(2)
        report = services.reconcile()

        def settled():
            """every instance running or failed"""
            statuses = set(Instance.objects.values_list("status", flat=True))
            return statuses <= {"running", "failed"}

        wait_for(settled, timeout=120, every=0.5)
    finally:
        worker.stop()
    final = Counter(Instance.objects.values_list("status", flat=True))
    tagged = {h.instance_uuid for h in services.get_provider().find_tagged()}
    live_rows = {
        str(pk)
        for pk in Instance.objects.filter(status__in=Instance.LIVE).values_list("pk", flat=True)
    }
    worst = max(worst, most_live_hosts_per_row())
    with capsys.disabled():
        print(
            f"\nchaos: {TRIALS} SIGKILLs, killed while {dict(killed_in)}; "
            f"reconcile re-enqueued {len(report.enqueued)}, adopted {len(report.adopted)}, "
            f"orphans {len(report.orphans_terminated)}; final {dict(final)}; "
            f"most live cloud hosts for one row: {worst}"
        )
    assert worst <= 1
    assert tagged <= live_rows, "orphans left in the cloud"
    assert set(final) <= {"running", "failed"}
    assert sum(final.values()) == TRIALS
