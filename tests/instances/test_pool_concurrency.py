"""Two autoscaler passes started at the same moment launch each missing host once, and an
admin's quota change in the middle of a pass deadlocks with nothing, on PostgreSQL (SQLite
serialises writers, so the races mean nothing there)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from instances import services
from instances.models import Image, Instance, Pool
from instances.services import quota_set
from portal.models import Project
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


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        # The statistics views are a snapshot kept for the whole transaction: take a new one.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_raising_the_quota_during_a_pass_neither_deadlocks_nor_keeps_the_old_backoff(
    make_pool, projects, ada
):
    """A pass holds its pools' rows and then asks for the project's row to submit a launch
    (autoscale's lock order); the admin raises the quota in between. Before, quota_set took
    the project's row and then waited on the pool's to clear its backoff: PostgreSQL killed
    one of the two ("deadlock detected", seen in CI). Now both finish, and the backoff the pass
    set on the old limits is cleared after it."""
    vision = projects["vision-lab"]
    quota_set(project=vision, actor=ada, max_gpus=1)
    pool = make_pool(desired=2)
    services.autoscale()  # one host launched, the second refused: the pool backs off
    pool.refresh_from_db()
    assert pool.blocked_until is not None
    pool_held, errors = threading.Event(), []

    def the_pass() -> None:
        close_old_connections()
        try:
            with transaction.atomic():
                Pool.objects.select_for_update().get(pk=pool.pk)
                pool_held.set()
                # The admin's change is under way (waiting on a lock) before the pass goes on.
                for _ in range(200):
                    if _waiting_on_a_lock():
                        break
                    time.sleep(0.05)
                Project.objects.select_for_update().get(pk=vision.pk)
                Pool.objects.filter(pk=pool.pk).update(
                    blocked_until=timezone.now() + timedelta(minutes=10)
                )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    def the_admin() -> None:
        close_old_connections()
        try:
            pool_held.wait(10)
            quota_set(project=vision, actor=ada, max_gpus=8)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=the_pass), threading.Thread(target=the_admin)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    pool.refresh_from_db()
    assert pool.blocked_until is None
