"""Pools: one autoscaler pass over 100 pools / 1,000 hosts and over 1,000 pools / 10,000 hosts
(each pool at desired, tracking a GPU target with readings at it, with a schedule not due):
time and queries side by side. Goals: equal query counts, time ratio at most 12."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances import services
from instances.models import (
    GpuReading,
    Image,
    Instance,
    InstanceType,
    Order,
    Pool,
    PoolSchedule,
)
from instances.services import quota_set
from tests.bench.bench_orders import KEY, setup_people

HOSTS_PER_POOL = 10
READING_MINUTES = 6


def _pools(user, project, start: int, count: int) -> None:
    """``count`` pools at desired, each with its running hosts, a schedule and six minutes of
    readings at the target, written in bulk."""
    kind = InstanceType.objects.get(name="g5.xlarge")
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    now = timezone.now()
    order = Order.objects.create(
        requester=user,
        project=project,
        instance_type=kind,
        image=image,
        market="on_demand",
        count=HOSTS_PER_POOL,
        lease_hours=168,
        region="us-east-1",
        ssh_public_key=KEY,
        ssh_key_fingerprint="b",
        quoted_price_per_hour=kind.on_demand_price_per_hour,
    )
    pools = [
        Pool(
            project=project,
            name=f"bench-{n}",
            created_by=user,
            instance_type=kind,
            image=image,
            ssh_public_key=KEY,
            ssh_key_fingerprint="b",
            min_size=1,
            desired=HOSTS_PER_POOL,
            max_size=HOSTS_PER_POOL * 2,
            approved_max=HOSTS_PER_POOL * 2,
            on_demand_base=2,
            spot_percent=50,
            target_gpu_utilization=70,
            warmup_minutes=0,
            launch_order=order,
        )
        for n in range(start, start + count)
    ]
    Pool.objects.bulk_create(pools, batch_size=2000)
    PoolSchedule.objects.bulk_create(
        [PoolSchedule(pool=pool, cron="0 21 * * *", desired=1, last_run_at=now) for pool in pools]
    )
    hosts = []
    for pool in pools:
        for n in range(HOSTS_PER_POOL):
            hosts.append(
                Instance(
                    order=order,
                    project=project,
                    owner=user,
                    instance_type=kind,
                    image=image,
                    market="on_demand" if n < 6 else "spot",  # 2 base + 4 of the 8 above
                    region="us-east-1",
                    status=Instance.Status.RUNNING,
                    client_token=uuid.uuid4().hex,
                    launched_at=now - timedelta(hours=1),
                    pool=pool,
                )
            )
    Instance.objects.bulk_create(hosts, batch_size=2000)
    minute = now.replace(second=0, microsecond=0)
    GpuReading.objects.bulk_create(
        [
            GpuReading(
                instance=host,
                minute=minute - timedelta(minutes=m + 1),
                utilization=70,
                memory_used_mib=1000,
            )
            for host in hosts
            for m in range(READING_MINUTES)
        ],
        batch_size=5000,
    )


def _pass(report, pools: int) -> tuple[float, int]:
    services.autoscale()  # warm: the first pass of a process loads zone data and the like
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        result = services.autoscale()
        seconds = time.perf_counter() - started
    assert result.pools == pools and not result.launched and not result.ended, result
    hosts = pools * HOSTS_PER_POOL
    report(f"autoscaler pass, {pools:,} pools / {hosts:,} hosts: time", f"{seconds * 1000:,.0f} ms")
    report(f"autoscaler pass, {pools:,} pools / {hosts:,} hosts: queries", f"{len(captured)}")
    return seconds, len(captured)


def run(report) -> None:
    from django.contrib.auth import get_user_model

    user, project = setup_people()
    admin, _ = get_user_model().objects.get_or_create(username="bench-admin", role="admin")
    quota_set(project=project, actor=admin, max_gpus=100_000)
    _pools(user, project, 0, 100)
    small = _pass(report, 100)
    _pools(user, project, 100, 900)
    large = _pass(report, 1_000)
    report(
        "side by side: 100 / 1,000 pools",
        f"{small[0] * 1000:,.0f} / {large[0] * 1000:,.0f} ms",
        f"time ratio {large[0] / small[0]:.1f} (goal <= 12); queries {small[1]} / {large[1]} "
        f"({'equal' if small[1] == large[1] else 'NOT equal'})",
    )
