"""Pools on PostgreSQL and Redis with a real worker and beat: a quota holds a pool at 4 of 6
and raising it lets the pool reach 6; a worker SIGKILLed at points spread over 12 scale-outs
(before the pass, during its launches, after them) never leaves more than desired hosts alive
after one reconcile pass, nor an orphan. ``pytest -s`` prints the figures."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db.models import Count

from instances import services
from instances.models import Image, Instance, Pool, PoolEvent, SimulatedHost
from instances.services import quota_set
from tests.conftest import ED25519
from tests.workers import Worker, purge_queues, trial_count, wait_for

pytestmark = [
    pytest.mark.redis,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.real_clock,
]
S = Instance.Status
ENV = {
    "PORTAL_AUTOSCALE_SECONDS": "1",
    "PORTAL_POOL_BACKOFF_SECONDS": "1",
    "PORTAL_POOL_BACKOFF_MAX_SECONDS": "2",
    "PORTAL_RECONCILE_SECONDS": "3",
    "PORTAL_SIMULATED_BOOT_SECONDS": "1",
}
SCALE_OUTS = trial_count("KILL_LOOP_TRIALS", 12)


def _pool(catalog, alice, projects, **fields) -> Pool:
    return services.pool_create(
        user=alice,
        project=projects["vision-lab"],
        name="workers",
        instance_type=catalog["g5.xlarge"],
        image=Image.objects.get(name="tf-2.17-cuda12.3"),
        ssh_public_key=ED25519,
        **fields,
    )


def _running(pool: Pool) -> int:
    return Instance.objects.filter(pool=pool, status=S.RUNNING).count()


def _in_the_cloud(pool: Pool) -> int:
    rows = [str(pk) for pk in Instance.objects.filter(pool=pool).values_list("pk", flat=True)]
    alive = SimulatedHost.objects.exclude(state__in=["shutting-down", "terminated"])
    return alive.filter(portal_instance__in=rows).count()


def _live(pool: Pool) -> int:
    return Instance.objects.filter(pool=pool, status__in=Instance.LIVE - {S.TERMINATING}).count()


def test_a_quota_holds_the_pool_at_4_of_6_until_it_is_raised(
    worker_process, catalog, alice, ada, projects
):
    vision = projects["vision-lab"]
    quota_set(project=vision, actor=ada, max_gpus=4)
    pool = _pool(catalog, alice, projects, desired=6, max_size=8)
    started = time.monotonic()
    worker_process(beat=True, **ENV)

    def four_running_and_refused():
        """4 hosts running and the refusal on the pool's events"""
        refused = pool.events.filter(kind=PoolEvent.Kind.REFUSED).first()
        return refused if _running(pool) == 4 and refused else None

    refused = wait_for(four_running_and_refused, timeout=60)
    held_at = time.monotonic() - started
    assert refused.message.startswith("quota holds pool at 4 of 6: ")
    time.sleep(4)  # several passes more: still 4, one event
    assert _live(pool) == 4
    assert pool.events.filter(kind=PoolEvent.Kind.REFUSED).count() == 1
    quota_set(project=vision, actor=ada, max_gpus=8)
    raised = time.monotonic()
    wait_for(lambda: _running(pool) == 6, timeout=60)
    print(
        f"\npool held at 4 of 6 by the quota after {held_at:.1f} s; "
        f"6 running {time.monotonic() - raised:.1f} s after the quota was raised"
    )


def test_a_worker_killed_at_points_spread_over_scale_outs_never_leaves_more_than_desired(
    catalog, alice, projects
):
    pool = _pool(catalog, alice, projects, desired=0, max_size=SCALE_OUTS)
    kills = []
    for trial in range(SCALE_OUTS):
        services.pool_set_desired(pool=pool, user=alice, desired=trial + 1)
        purge_queues() if trial == 0 else None
        worker = Worker(beat=True, **ENV).start()
        # Beat starts with the worker and sends a pass within about two seconds: the kills,
        # spread evenly from 0.25 to 4 s after the worker is ready, land before the pass and
        # during and after the launches it sends (the print says how many landed where).
        pause = 0.25 + 3.75 * trial / max(1, SCALE_OUTS - 1)
        time.sleep(pause)
        worker.kill()
        kills.append((trial + 1, round(pause, 2), _live(pool), _in_the_cloud(pool)))
        assert _live(pool) <= trial + 1  # rows: the pass is one transaction
    pool.refresh_from_db()
    # --- one reconcile pass, nothing else running ---
    services.reconcile()
    cloud = (
        SimulatedHost.objects.exclude(state__in=["shutting-down", "terminated"])
        .exclude(portal_instance="")
        .values("portal_instance")
        .annotate(n=Count("id"))
    )
    live_rows = {
        str(pk)
        for pk in Instance.objects.filter(status__in=Instance.LIVE - {S.TERMINATING}).values_list(
            "pk", flat=True
        )
    }
    alive_in_cloud = {row["portal_instance"]: row["n"] for row in cloud}
    orphans = sorted(set(alive_in_cloud) - live_rows)
    pool_hosts_alive = sum(n for uuid, n in alive_in_cloud.items() if uuid in live_rows)
    assert orphans == [], orphans
    assert all(n == 1 for n in alive_in_cloud.values()), alive_in_cloud
    assert pool_hosts_alive <= pool.desired
    # --- then a worker and beat settle the pool at desired ---
    settle = Worker(beat=True, **ENV).start()
    try:
        wait_for(lambda: _running(pool) == pool.desired, timeout=120)
    finally:
        settle.stop()
    landed = Counter(
        "before the pass committed" if live < desired else "after it committed"
        for desired, _, live, _ in kills
    )
    print(
        f"\n{SCALE_OUTS} scale-outs, worker SIGKILLed after (desired, seconds, live rows, "
        f"hosts in the cloud): {kills}\nkills landed: {dict(landed)}\n"
        f"after one reconcile pass: {pool_hosts_alive} hosts alive in the cloud for desired "
        f"{pool.desired}, {len(orphans)} orphans; settled at {_running(pool)} running"
    )
