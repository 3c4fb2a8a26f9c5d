"""Chaos for clusters: a real worker process SIGKILLed at random points of cluster launches, with
late and lost replies and throttling on (PostgreSQL and Redis). Afterwards every cluster runs
whole or not at all: no cluster with some nodes running and others not, no node with two hosts,
no cloud host left without a live node. ``pytest -s`` prints its figures."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from instances import tasks
from instances.models import Instance, Order, SimulatedHost
from instances.providers.faults import FAULT_DICE
from tests.instances.test_chaos import hosts_per_row, poll, reconcile_pass
from tests.workers import Worker, purge_queues, trial_count

S = Instance.Status
TRIALS = trial_count("CLUSTER_CHAOS_TRIALS", 6)
# Every cloud call takes 50 ms to arrive and its reply 400 ms after the cloud acted: a window of
# 400 ms in each cluster launch with the nodes made and not yet recorded. The cluster's launch
# honours its tokens (one transaction on the simulated cloud, one ClientToken on EC2).
FAULTS = {
    "PORTAL_SIMULATED_API_LATENCY_SECONDS": 0.05,
    "PORTAL_SIMULATED_REPLY_LATENCY_SECONDS": 0.4,
    "PORTAL_SIMULATED_LOST_REPLY_RATE": 0.25,
    "PORTAL_SIMULATED_THROTTLE_RATE": 0.1,
    "PORTAL_SIMULATED_THROTTLE_BURST_CALLS": 3,
    "PORTAL_SIMULATED_BOOT_SECONDS": 1,
}
WORKER_ENV = {
    **{name: str(value) for name, value in FAULTS.items()},
    "PORTAL_PROVISION_RETRY_BACKOFF_SECONDS": "0",
    "PORTAL_PROVISION_MAX_RETRIES": "12",
}
WINDOW = "nodes launched, not recorded"


def cluster_hosts(order: Order) -> list[SimulatedHost]:
    return list(
        SimulatedHost.objects.filter(tags__contains={"portal:cluster": str(order.pk)}).exclude(
            state__in=["shutting-down", "terminated"]
        )
    )


def phase_of(order: Order) -> str:
    nodes = list(order.instances.all())
    if all(node.status == S.REQUESTED for node in nodes):
        return "before the task started"
    if not any(node.cloud_id for node in nodes):
        return WINDOW if cluster_hosts(order) else "before the launch"
    return "recorded"


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.real_clock  # real workers stamp rows with the wall clock (tests/clock.py)
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_during_cluster_launches_leaves_every_cluster_whole_or_gone(
    place_order, alice, catalog, settings, capsys
):
    rng = random.Random(20261204)
    purge_queues()
    phases: Counter[str] = Counter()
    orders = []
    for trial in range(TRIALS):
        worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED=str(2000 + trial)).start()
        order = place_order(alice, instance_type=catalog["g5.xlarge"], placement="cluster", count=2)
        orders.append(order)
        # Every node's task launches the whole cluster: two workers' worth of repeats at once.
        for node in order.instances.all():
            tasks.provision_instance.delay(str(node.pk))
        if trial % 2:
            time.sleep(rng.uniform(0.0, 2.0))
        else:
            poll(lambda order=order: cluster_hosts(order), timeout=8)
            time.sleep(rng.uniform(0.0, 0.3))
        worker.kill()
        phases[phase_of(order)] += 1

    # Reconcile (with the same faults) and a worker, until every node runs or has failed.
    for name, value in FAULTS.items():
        setattr(settings, name, value)
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 3
    FAULT_DICE.reset()
    worker = Worker(**WORKER_ENV, PORTAL_SIMULATED_SEED="2999").start()
    started = time.monotonic()
    try:
        while time.monotonic() - started < 180:
            reconcile_pass()
            statuses = set(Instance.objects.values_list("status", flat=True))
            if statuses <= {S.RUNNING, S.FAILED, S.TERMINATED}:
                break
            time.sleep(1.5)
        settled = time.monotonic() - started
    finally:
        worker.stop()
    reconcile_pass()
    purge_queues()
    FAULT_DICE.reset()

    outcomes = Counter()
    partial = []
    for order in orders:
        statuses = sorted(order.instances.values_list("status", flat=True))
        outcomes[" + ".join(statuses)] += 1
        running = statuses.count(S.RUNNING)
        if running not in (0, len(statuses)):
            partial.append(str(order.pk))
        live_nodes = {
            str(pk)
            for pk in order.instances.filter(status__in=Instance.LIVE).values_list("pk", flat=True)
        }
        hosts = cluster_hosts(order)
        assert {host.portal_instance for host in hosts} <= live_nodes, "a host without its node"
    per_row = hosts_per_row()
    with capsys.disabled():
        print(
            f"\ncluster chaos: {TRIALS} SIGKILLs during 2-node cluster launches; killed while: "
            f"{dict(phases)}; settled in {settled:.1f} s; clusters ended as {dict(outcomes)}; "
            f"partial clusters {len(partial)}; most hosts for one node "
            f"{max(per_row.values(), default=0)}"
        )
    assert phases[WINDOW] >= 1, "no kill landed between the launch and its record"
    assert partial == [], "a cluster runs with only some of its nodes"
    assert max(per_row.values(), default=0) <= 1
    assert outcomes[f"{S.RUNNING} + {S.RUNNING}"] >= 1, "no cluster came up at all"
