"""A stopped host's lease still ends it, disk included (leases_expire): stopping it answers its
idle and stuck notices, not its lease warning, which stays open until the host ends or the lease
is extended; and Stop's confirmation says when the lease still ends it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils.dateformat import format as date_format

from instances import services, tasks
from instances.models import Instance
from instances.services.transitions import instance_topic
from portal.models import Notice
from portal.services import notice_send

pytestmark = pytest.mark.django_db


def _warned_then_stopped(clock, alice, running_host) -> tuple[Instance, Notice]:
    """A host warned by the real lease pass (30 minutes left), then stopped by its owner."""
    host = running_host(lease_hours=8)
    clock.move_to(host.lease_expires_at - timedelta(minutes=30))
    assert services.leases_warn() == [(str(host.pk), 60)]
    lease = Notice.objects.get(user=alice, topic=instance_topic(host, "lease"))
    services.instance_request_stop(instance=host, user=alice)
    tasks.stop_instance.apply(args=[str(host.pk)])
    host = Instance.objects.get(pk=host.pk)
    assert host.status == Instance.Status.STOPPED
    lease.refresh_from_db()
    return host, lease


def test_stopping_a_host_keeps_its_lease_warning_open_and_closes_its_idle_and_stuck_ones(
    clock, alice, ada, running_host
):
    host = running_host(lease_hours=8)
    idle = notice_send(user=alice, subject="Idle host", topic=instance_topic(host, "idle"))
    stuck = notice_send(user=ada, subject="No worker", topic=instance_topic(host, "stuck"))
    lease = notice_send(user=alice, subject="Lease ends", topic=instance_topic(host, "lease"))
    services.instance_request_stop(instance=host, user=alice)
    tasks.stop_instance.apply(args=[str(host.pk)])
    assert Instance.objects.get(pk=host.pk).status == Instance.Status.STOPPED
    for notice in (idle, stuck, lease):
        notice.refresh_from_db()
    assert idle.closed_reason == "The host is stopped."
    assert stuck.closed_reason == "The host is stopped."
    assert lease.closed_at is None


def test_a_stopped_hosts_lease_warning_closes_when_its_lease_ends_it(clock, alice, running_host):
    host, lease = _warned_then_stopped(clock, alice, running_host)
    assert lease.closed_at is None
    clock.move_to(host.lease_expires_at + timedelta(seconds=1))
    assert services.leases_expire() == [str(host.pk)]
    tasks.terminate_instance.apply(args=[str(host.pk)])
    assert Instance.objects.get(pk=host.pk).status == Instance.Status.TERMINATED
    lease.refresh_from_db()
    assert lease.closed_reason == "The host is terminated."


def test_a_stopped_hosts_lease_warning_closes_when_the_lease_is_extended(
    clock, alice, running_host
):
    host, lease = _warned_then_stopped(clock, alice, running_host)
    services.instance_extend_lease(instance=host, user=alice, hours=2)
    lease.refresh_from_db()
    assert lease.closed_reason.startswith("Lease extended by alice")


def test_stops_confirmation_says_when_the_lease_still_ends_the_host(clock, alice, running_host):
    host = running_host(lease_hours=8)
    host = Instance.objects.with_detail().select_related("pool").get(pk=host.pk)
    end = host.lease_expires_at
    said = {action.name: action for action in host.actions_now}["stop"]
    when = f"{date_format(end, 'M j, H:i')} UTC"
    assert said.confirm == (
        "Its disk is kept; while it is stopped you pay only for the disk. Its lease still ends "
        f"at {when}, stopped or not: the host and its disk are deleted then."
    )
