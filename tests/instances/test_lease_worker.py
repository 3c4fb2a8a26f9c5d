"""Lease warnings through real workers on Redis: beat's task sent again and again, two passes at
once, and a worker killed and replaced, still give each warning once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances import tasks
from instances.models import Instance, LeaseNotice
from portal.models import Notice
from tests.workers import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _passes_done(worker) -> int:
    return sum(
        "Task instances.tasks.warn_leases[" in line and "succeeded" in line
        for line in worker.output
    )


def _send_passes(worker, times: int) -> None:
    for _ in range(times):
        tasks.warn_leases.delay()

    def all_done():
        """every warn_leases pass sent to this worker finished"""
        return _passes_done(worker) >= times

    wait_for(all_done, timeout=60)


def test_a_lease_warning_is_sent_once_across_passes_and_a_worker_restart(
    worker_process, alice, running_host
):
    host = running_host(lease_hours=48)
    # Thirty minutes left of the lease: the 1 h warning is due (arranged, not waited for).
    Instance.objects.filter(pk=host.pk).update(
        lease_expires_at=timezone.now() + timedelta(minutes=30)
    )
    first = worker_process()
    _send_passes(first, 6)
    assert LeaseNotice.objects.filter(instance=host).count() == 1
    assert Notice.objects.filter(user=alice, subject__startswith="Lease ends").count() == 1

    first.kill()  # SIGKILL: no warm shutdown
    second = worker_process()
    _send_passes(second, 6)
    notices = list(
        Notice.objects.filter(user=alice, subject__startswith="Lease ends").values_list(
            "subject", flat=True
        )
    )
    assert len(notices) == 1, notices
    assert notices[0].startswith("Lease ends in 29 minutes") or notices[0].startswith(
        "Lease ends in 30 minutes"
    )
    assert LeaseNotice.objects.filter(instance=host, minutes_before=60).count() == 1
    assert host.events.filter(reason__startswith="lease warning").count() == 1
