"""Ordering and listing hosts: order-to-launch overhead, list query count and latency, and the
list on the seeded demo (p50 and spot-price rows read, before and now)."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from instances.models import Image, Instance, InstanceEvent, InstanceType, Order
from instances.providers.simulated import SimulatedProvider
from portal.celery import app as celery_app
from portal.models import Membership, Project, User
from portal.services import membership_set, project_upsert, user_upsert

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl b@x"
ORDER = {
    "project": "bench-lab",
    "instance_type": "g5.xlarge",
    "image": "tf-2.17-cuda12.3",
    "market": "on_demand",
    "count": 1,
    "ssh_public_key": KEY,
}


def setup_people() -> tuple[User, Project]:
    call_command("sync_catalog", verbosity=0, stdout=open("/dev/null", "w"))  # noqa: SIM115
    user, _ = user_upsert(username="bench", role=User.Role.RESEARCHER, password="bench-pw-1")
    project, _ = project_upsert(slug="bench-lab", name="Bench Lab")
    membership_set(project=project, user=user, role=Membership.Role.MEMBER)
    return user, project


def _order_to_launch(user: User, runs: int) -> list[float]:
    """Seconds from the start of POST /api/v1/orders/ to the provider's launch call."""
    client = Client()
    client.force_login(user)
    called: list[float] = []
    real_launch = SimulatedProvider.launch

    def timed_launch(self, request):
        called.append(time.perf_counter())
        return real_launch(self, request)

    samples = []
    SimulatedProvider.launch = timed_launch
    celery_app.conf.task_always_eager = True
    try:
        with override_settings(
            PORTAL_SIMULATED_BOOT_SECONDS=0, PORTAL_SIMULATED_API_LATENCY_SECONDS=0
        ):
            for _ in range(runs):
                called.clear()
                started = time.perf_counter()
                response = client.post("/api/v1/orders/", ORDER, content_type="application/json")
                assert response.status_code == 201, response.content
                samples.append(called[0] - started)
                # Keep the simulated cloud's capacity free for the next order.
                Instance.objects.all().update(status="terminated")
                from instances.models import SimulatedHost

                SimulatedHost.objects.update(state="terminated")
    finally:
        celery_app.conf.task_always_eager = False
        SimulatedProvider.launch = real_launch
    return samples


def _order_to_launch_through_worker(user: User, runs: int) -> list[float]:
    """The same, through the broker and a real worker process: POST to the cloud's record of
    the launch (SimulatedHost.launched_at, set inside the launch call)."""
    from instances.models import SimulatedHost
    from tests.workers import Worker, purge_queues

    client = Client()
    client.force_login(user)
    purge_queues()
    worker = Worker().start()
    samples = []
    try:
        for _ in range(runs):
            started = timezone.now()
            response = client.post("/api/v1/orders/", ORDER, content_type="application/json")
            assert response.status_code == 201
            instance_id = response.json()["instances"][0]["id"]
            deadline = time.monotonic() + 30
            host = None
            while host is None and time.monotonic() < deadline:
                host = SimulatedHost.objects.filter(portal_instance=instance_id).first()
                if host is None:
                    time.sleep(0.002)
            assert host is not None, "the worker never launched"
            samples.append((host.launched_at - started).total_seconds())
            SimulatedHost.objects.update(state="terminated")
    finally:
        worker.stop()
    return samples


def host_records(
    user: User,
    project: Project,
    n: int,
    *,
    kind: str = "g5.xlarge",
    status: str = "running",
    each: Callable[[int], dict] | None = None,
) -> list[Instance]:
    """``n`` host records of ``kind`` in one order of ``project``, in ``status``, as fast as the
    ORM makes them (no cloud); ``each(k)`` gives the k-th row's other fields."""
    itype = InstanceType.objects.get(name=kind)
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    order = Order.objects.create(
        requester=user,
        project=project,
        instance_type=itype,
        image=image,
        market="on_demand",
        count=n,
        lease_hours=24,
        region=settings.PORTAL_REGION,
        ssh_public_key=KEY,
        ssh_key_fingerprint="SHA256:bench",
        quoted_price_per_hour=itype.on_demand_price_per_hour,
    )
    rows = []
    for k in range(n):
        pk = uuid.uuid4()
        rows.append(
            Instance(
                id=pk,
                order=order,
                project=project,
                owner=user,
                instance_type=itype,
                image=image,
                market="on_demand",
                region=settings.PORTAL_REGION,
                status=status,
                client_token=f"portal-{pk.hex}",
                **(each(k) if each else {}),
            )
        )
    return Instance.objects.bulk_create(rows, batch_size=500)


def make_instances(user: User, project: Project, n: int) -> None:
    """``n`` running g5.xlarge hosts, each with its three events, in place of every host."""
    Instance.objects.all().delete()
    Order.objects.all().delete()
    now = timezone.now()
    rows = host_records(
        user,
        project,
        n,
        each=lambda k: {
            "status_changed_at": now - timedelta(minutes=k),
            "cloud_id": f"i-bench{k:010d}",
            "public_ip": "198.51.100.7",
        },
    )
    events = []
    for row in rows:
        events += [
            InstanceEvent(
                instance=row,
                old_status="",
                new_status="requested",
                at=row.status_changed_at - timedelta(seconds=60),
                actor="bench",
            ),
            InstanceEvent(
                instance=row,
                old_status="requested",
                new_status="provisioning",
                at=row.status_changed_at - timedelta(seconds=50),
                actor="bench",
            ),
            InstanceEvent(
                instance=row,
                old_status="provisioning",
                new_status="running",
                at=row.status_changed_at,
                actor="bench",
            ),
        ]
    InstanceEvent.objects.bulk_create(events, batch_size=1000)


def _list(client: Client, page_size: int = 50) -> tuple[int, float]:
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get(f"/api/v1/instances/?page_size={page_size}")
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    return len(queries), elapsed


def run(report) -> None:
    user, project = setup_people()
    samples = _order_to_launch(user, runs=60)
    p50 = statistics.median(samples)
    report(
        "order POST -> provider launch call, p50 (in-process)",
        f"{p50 * 1000:.1f} ms",
        f"p90 {statistics.quantiles(samples, n=10)[-1] * 1000:.1f} ms; 60 orders, "
        "zero-latency simulated cloud, Celery eager (no broker hop)",
    )

    if settings.CELERY_BROKER_URL.startswith("redis"):
        through = _order_to_launch_through_worker(user, runs=30)
        report(
            "order POST -> launch, p50 (through Redis and a worker)",
            f"{statistics.median(through) * 1000:.1f} ms",
            f"p90 {statistics.quantiles(through, n=10)[-1] * 1000:.1f} ms; 30 orders in turn",
        )
    else:
        report("order POST -> launch through a worker", "skipped", "needs a Redis broker")

    client = Client()
    client.force_login(user)
    figures = {}
    for n in (10, 1000):
        make_instances(user, project, n)
        _list(client)  # warm
        counts, times, small = set(), [], []
        for _ in range(40):
            count, elapsed = _list(client)
            counts.add(count)
            times.append(elapsed)
            small.append(_list(client, page_size=10)[1])
        figures[n] = (counts, statistics.median(times), statistics.median(small))
    q10, q1000 = figures[10][0], figures[1000][0]
    report("SQL queries, GET /api/v1/instances/ at 10 instances", ",".join(map(str, sorted(q10))))
    report(
        "SQL queries, GET /api/v1/instances/ at 1,000 instances",
        ",".join(map(str, sorted(q1000))),
        "equal" if q10 == q1000 else "NOT EQUAL",
    )
    ratio = figures[1000][1] / figures[10][1]
    report(
        "list latency p50 at 1,000 vs 10 instances (page of 50)",
        f"{ratio:.2f}x",
        f"{figures[1000][1] * 1000:.1f} ms vs {figures[10][1] * 1000:.1f} ms "
        "(50 rows on the page vs 10)",
    )
    ratio = figures[1000][2] / figures[10][2]
    report(
        "list latency p50 at 1,000 vs 10 instances (page of 10)",
        f"{ratio:.2f}x",
        f"{figures[1000][2] * 1000:.1f} ms vs {figures[10][2] * 1000:.1f} ms (same rows shown)",
    )
    from tests.bench import host_list

    host_list.run(report)
