"""Chaos for MIG slices: two people's slice orders launched by real worker processes, one of them
SIGKILLed at random points, with late and lost cloud replies (PostgreSQL and Redis). Afterwards
no slice is held by two, every slice runs on its own MIG device, and the shared hosts are as
few as the slices need (a killed placement neither loses its slice nor launches a spare host).
``pytest -s`` prints its figures."""

from __future__ import annotations

import math
import random
import time
from collections import Counter

import pytest

from instances import tasks
from instances.models import Instance, MigSlot
from instances.providers.faults import FAULT_DICE
from tests.instances.test_chaos import reconcile_pass
from tests.workers import Worker, purge_queues, trial_count

S = Instance.Status
TRIALS = trial_count("MIG_CHAOS_TRIALS", 3)
FAULTS = {
    "PORTAL_SIMULATED_API_LATENCY_SECONDS": 0.05,
    "PORTAL_SIMULATED_REPLY_LATENCY_SECONDS": 0.2,
    "PORTAL_SIMULATED_LOST_REPLY_RATE": 0.2,
    "PORTAL_SIMULATED_BOOT_SECONDS": 1,
}
WORKER_ENV = {
    **{name: str(value) for name, value in FAULTS.items()},
    "PORTAL_PROVISION_RETRY_BACKOFF_SECONDS": "0",
    "PORTAL_PROVISION_MAX_RETRIES": "12",
}
# A p4d's eight A100s split into 7g.40gb slices hold eight: a few orders fill several hosts.
PROFILE, PER_HOST = "7g.40gb", 8


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.real_clock  # real workers stamp rows with the wall clock (tests/clock.py)
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_placing_slices_gives_no_slice_to_two(
    place_order, alice, bob, catalog, settings, capsys
):
    settings.PORTAL_SIMULATED_AGENTS = True
    rng = random.Random(20261204)
    purge_queues()
    records = []
    for trial in range(TRIALS):
        worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED=str(3000 + trial)).start()
        for user in (alice, bob, alice, bob):
            order = place_order(
                user, instance_type=catalog["p4d.24xlarge"], mig_profile=PROFILE, count=2
            )
            for record in order.instances.all():
                records.append(record.pk)
                tasks.provision_instance.delay(str(record.pk))
        time.sleep(rng.uniform(0.2, 2.0))
        worker.kill()

    for name, value in FAULTS.items():
        setattr(settings, name, value)
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 3
    FAULT_DICE.reset()
    worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED="3999").start()
    started = time.monotonic()
    try:
        while time.monotonic() - started < 180:
            reconcile_pass()
            statuses = set(Instance.objects.filter(pk__in=records).values_list("status", flat=True))
            if statuses <= {S.RUNNING, S.FAILED}:
                break
            time.sleep(1.5)
        settled = time.monotonic() - started
    finally:
        worker.stop()
    purge_queues()
    FAULT_DICE.reset()

    slices = list(Instance.objects.filter(pk__in=records).select_related("mig_slot", "owner"))
    outcomes = Counter(record.status for record in slices)
    held = [record.held_slot for record in slices if record.status == S.RUNNING]
    hosts = Instance.objects.filter(order__mig_host=True)
    with capsys.disabled():
        print(
            f"\nMIG chaos: {TRIALS} SIGKILLs while placing {len(records)} {PROFILE} slices of "
            f"two people; settled in {settled:.1f} s; slices ended as {dict(outcomes)}; "
            f"shared hosts {hosts.count()} for {len(held)} slices ({PER_HOST} a host)"
        )
    assert outcomes == {S.RUNNING: len(records)}, "a slice did not come up"
    assert None not in held
    assert len({slot.device_uuid for slot in held}) == len(held), "one device for two slices"
    assert MigSlot.objects.filter(holder__isnull=False).count() == len(records)
    assert hosts.count() == math.ceil(len(records) / PER_HOST), "a spare shared host"
    tenants: dict = {}
    for record in slices:
        tenants.setdefault(record.held_slot.host_id, set()).add(record.owner.username)
    assert {"alice", "bob"} in tenants.values(), "no host shared by the two"
