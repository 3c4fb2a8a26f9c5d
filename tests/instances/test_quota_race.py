"""32 one-GPU orders at once against a quota of 4 GPUs, twenty times, on PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from instances.models import Image, Instance, Order
from instances.selectors.quotas import usage
from instances.services import quota_set
from instances.services.quotas import QuotaExceeded
from tests.conftest import ED25519

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TRIALS, ORDERS, LIMIT = 20, 32, 4


def test_concurrent_orders_never_exceed_the_quota(catalog, alice, ada, projects, capsys):
    from instances import services

    vision = projects["vision-lab"]
    quota_set(project=vision, actor=ada, max_gpus=LIMIT)
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    accepted_per_trial = []
    for _ in range(TRIALS):
        Instance.objects.all().delete()
        Order.objects.all().delete()
        barrier = threading.Barrier(ORDERS)
        outcomes: list[str] = []

        def order(barrier=barrier, outcomes=outcomes) -> None:
            close_old_connections()
            try:
                barrier.wait()
                services.order_submit(
                    requester=alice,
                    project=vision,
                    instance_type=catalog["g5.xlarge"],
                    image=image,
                    market="on_demand",
                    count=1,
                    lease_hours=1,
                    ssh_public_key=ED25519,
                )
                outcomes.append("accepted")
            except QuotaExceeded:
                outcomes.append("refused")
            finally:
                connection.close()

        threads = [threading.Thread(target=order) for _ in range(ORDERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        accepted = outcomes.count("accepted")
        accepted_per_trial.append(accepted)
        live = Instance.objects.filter(status__in=Instance.LIVE).count()
        assert len(outcomes) == ORDERS
        assert accepted <= LIMIT
        assert usage(project=vision).gpus == live == accepted
    with capsys.disabled():
        print(f"\nquota race: accepted per trial {accepted_per_trial} (limit {LIMIT})")
    assert max(accepted_per_trial) == LIMIT
