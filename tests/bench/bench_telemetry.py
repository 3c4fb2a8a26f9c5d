"""GPU telemetry: one minute of readings for 1,000 and 10,000 hosts, the simulated cloud's
collection pass and the agents' ingest path, time and queries."""

from __future__ import annotations

import ipaddress
import time
import uuid

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from instances import services
from instances.models import GpuReading, Image, Instance, InstanceType, Order, SimulatedHost
from tests.bench.bench_orders import KEY, setup_people


def _hosts(user, project, start: int, count: int) -> list[Instance]:
    """``count`` running hosts, with their simulated cloud hosts, written in bulk."""
    kind = InstanceType.objects.get(name="g5.xlarge")
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    now = timezone.now()
    order = Order.objects.create(
        requester=user,
        project=project,
        instance_type=kind,
        image=image,
        market="on_demand",
        count=1,
        lease_hours=8,
        region="us-east-1",
        ssh_public_key=KEY,
        ssh_key_fingerprint="b",
        quoted_price_per_hour=kind.on_demand_price_per_hour,
    )
    hosts, cloud = [], []
    for n in range(start, start + count):
        token = uuid.uuid4().hex
        cloud_id = f"i-bench{n:08d}"
        hosts.append(
            Instance(
                order=order,
                project=project,
                owner=user,
                instance_type=kind,
                image=image,
                market="on_demand",
                region="us-east-1",
                status=Instance.Status.RUNNING,
                client_token=token,
                cloud_id=cloud_id,
                launched_at=now,
            )
        )
        cloud.append(
            SimulatedHost(
                cloud_id=cloud_id,
                client_token=token,
                params_digest="b",
                tags={},
                instance_type="g5.xlarge",
                image_id="ami",
                market="on_demand",
                region="us-east-1",
                availability_zone="us-east-1a",
                # A cloud gives each live host its own addresses (a constraint says so).
                private_ip=str(ipaddress.ip_address("10.0.0.0") + n),
                public_ip=str(ipaddress.ip_address("198.18.0.0") + n),
                state="running",
                state_changed_at=now,
                launched_at=now,
            )
        )
    Instance.objects.bulk_create(hosts, batch_size=2000)
    SimulatedHost.objects.bulk_create(cloud, batch_size=2000)
    return hosts


def _measure(report, label: str, count: int, call) -> None:
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        stored = call()
        seconds = time.perf_counter() - started
    report(f"{label}, {count:,} hosts: time", f"{seconds * 1000:,.0f} ms", f"{stored:,} stored")
    report(f"{label}, {count:,} hosts: queries", f"{len(captured)}")


def run(report) -> None:
    user, project = setup_people()
    made = 0
    for count in (1_000, 10_000):
        hosts = _hosts(user, project, made, count - made)
        made = count
        ids = [
            str(pk) for pk in Instance.objects.filter(status="running").values_list("pk", flat=True)
        ]
        _measure(report, "simulated cloud pass", count, lambda: services.telemetry_collect().stored)
        at = timezone.now()  # the same minute again: each reading replaces the last
        readings = [services.Reading(pk, at, 50, 12_000) for pk in ids]
        _measure(
            report,
            "agents' minute (one batch)",
            count,
            lambda readings=readings: services.readings_ingest(readings).stored,
        )
        del hosts
    report("minute rows kept", f"{GpuReading.objects.count():,}")
