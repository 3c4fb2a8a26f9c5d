"""Fixtures and helpers of the pool tests: a pool of alice's in vision-lab, provisioning what
the autoscaler asked for (the tasks it sends on commit, run here by hand), readings."""

from __future__ import annotations

import pytest

from instances import services
from instances.models import GpuReading, Image, Instance, Pool
from tests.conftest import ED25519

S = Instance.Status


@pytest.fixture
def make_pool(catalog, projects, alice):
    def make(user=None, **overrides) -> Pool:
        fields = {
            "user": user or alice,
            "project": projects["vision-lab"],
            "name": "trainers",
            "instance_type": catalog["g5.xlarge"],
            "image": Image.objects.get(name="tf-2.17-cuda12.3"),
            "ssh_public_key": ED25519,
            "min_size": 0,
            "desired": 2,
            "max_size": 8,
        }
        fields.update(overrides)
        return services.pool_create(**fields)

    return make


def provision_all() -> list[Instance]:
    """Run the provision task of every requested host, as the worker would."""
    return [
        services.instance_provision(instance_id=pk)
        for pk in Instance.objects.filter(status=S.REQUESTED).values_list("pk", flat=True)
    ]


def settle_terminations() -> None:
    for pk in Instance.objects.filter(status=S.TERMINATING).values_list("pk", flat=True):
        services.instance_cloud_action(instance_id=pk, action="terminate")


def alive(pool: Pool, **filters) -> list[Instance]:
    return list(
        Instance.objects.filter(pool=pool, status__in=Instance.LIVE - {S.TERMINATING}, **filters)
    )


def readings(hosts, *, start, minutes: int, utilization) -> None:
    """Each host's GPU readings for ``minutes`` minutes from ``start`` (a number, or a
    function of the host)."""
    from datetime import timedelta

    rows = []
    for host in hosts:
        value = utilization(host) if callable(utilization) else utilization
        for minute in range(minutes):
            rows.append(
                GpuReading(
                    instance=host,
                    minute=start + timedelta(minutes=minute),
                    utilization=value,
                    memory_used_mib=1000,
                )
            )
    GpuReading.objects.bulk_create(rows)
