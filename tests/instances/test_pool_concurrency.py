"""Two autoscaler passes started at the same moment launch each missing host once, on
PostgreSQL (SQLite serialises writers, so the race means nothing there)."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from instances import services
from instances.models import Image, Instance, Pool
from tests.conftest import ED25519

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TRIALS, PASSES, POOLS, DESIRED = 10, 4, 3, 5


def test_simultaneous_passes_launch_each_missing_host_once(catalog, alice, projects, capsys):
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    launched_per_trial = []
    for trial in range(TRIALS):
        Instance.objects.filter(pool__isnull=False).delete()
        pools = [
            services.pool_create(
                user=alice,
                project=projects["vision-lab"],
                name=f"race-{trial}-{n}",
                instance_type=catalog["g5.xlarge"],
                image=image,
                ssh_public_key=ED25519,
                desired=DESIRED,
                max_size=8,
                spot_percent=50,
            )
            for n in range(POOLS)
        ]
        barrier = threading.Barrier(PASSES)
        launched: list[int] = []
        errors: list[BaseException] = []

        def one_pass(barrier=barrier, launched=launched, errors=errors) -> None:
            close_old_connections()
            try:
                barrier.wait()
                launched.append(len(services.autoscale().launched))
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)
            finally:
                connection.close()

        threads = [threading.Thread(target=one_pass) for _ in range(PASSES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert sum(launched) == POOLS * DESIRED, launched
        for pool in pools:
            assert Instance.objects.filter(pool=pool).count() == DESIRED
        # A later pass finds nothing missing.
        assert services.autoscale().launched == []
        launched_per_trial.append(launched)
        Pool.objects.filter(pk__in=[p.pk for p in pools]).update(status=Pool.Status.DELETED)
    with capsys.disabled():
        print(
            f"\n{TRIALS} trials of {PASSES} simultaneous passes over {POOLS} pools of desired "
            f"{DESIRED}: hosts launched per pass {launched_per_trial[:3]}..., "
            f"each trial exactly {POOLS * DESIRED}"
        )
