"""One transition function writes Instance.status; every legal move leaves an event."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from instances import services
from instances.models import Instance, InstanceEvent
from instances.services import IllegalTransition, instance_transition

S = Instance.Status
LEGAL = [(old, new) for old, targets in Instance.ALLOWED.items() for new in sorted(targets)]
ILLEGAL = [
    (old, new)
    for old in S.values
    for new in S.values
    if new != old and new not in Instance.ALLOWED[old]
]


@pytest.fixture
def host(place_order, alice):
    return place_order(alice).instances.get()


def put(instance: Instance, status: str) -> Instance:
    """Place a row in a status for the test, as if earlier moves had happened an hour ago."""
    Instance.objects.filter(pk=instance.pk).update(
        status=status, status_changed_at=timezone.now() - timedelta(hours=1)
    )
    instance.refresh_from_db()
    return instance


@pytest.mark.parametrize(("old", "new"), LEGAL)
def test_every_legal_move_is_made_and_recorded(host, old, new):
    put(host, old)
    cloud_time = timezone.now() + timedelta(seconds=5)
    row, moved = instance_transition(
        instance=host, to=new, reason="test", actor="system:test", at=cloud_time
    )
    assert moved and row.status == new
    event = InstanceEvent.objects.filter(instance=host).latest("recorded_at")
    assert (event.old_status, event.new_status, event.at) == (old, new, cloud_time)
    assert event.actor == "system:test" and event.reason == "test"


@pytest.mark.parametrize(("old", "new"), ILLEGAL)
def test_every_illegal_move_is_refused_and_changes_nothing(host, old, new):
    put(host, old)
    events = InstanceEvent.objects.count()
    with pytest.raises(IllegalTransition):
        instance_transition(instance=host, to=new, reason="test", actor="system:test")
    host.refresh_from_db()
    assert host.status == old
    assert InstanceEvent.objects.count() == events


def test_a_repeat_is_a_no_op(host):
    instance_transition(instance=host, to=S.PROVISIONING, reason="a", actor="system:test")
    row, moved = instance_transition(
        instance=host, to=S.PROVISIONING, reason="again", actor="system:test"
    )
    assert not moved and row.status == S.PROVISIONING
    assert InstanceEvent.objects.filter(instance=host, new_status=S.PROVISIONING).count() == 1


def test_the_lease_starts_when_the_host_first_runs(clock, host):
    put(host, S.PROVISIONING)
    started = timezone.now() - timedelta(minutes=3)
    row, _ = instance_transition(instance=host, to=S.RUNNING, reason="up", actor="x", at=started)
    assert row.lease_started_at == started
    assert row.lease_expires_at == started + timedelta(hours=8)


def test_a_lease_counts_from_first_running_however_late_after_launch(clock, alice, host):
    launched = timezone.now()
    Instance.objects.filter(pk=host.pk).update(launched_at=launched)
    put(host, S.PROVISIONING)
    ran = launched + timedelta(seconds=3)
    instance_transition(instance=host, to=S.RUNNING, reason="up", actor="x", at=ran)
    for hours in (40, 24):  # up to the portal's longest lease, 72 h
        row = services.instance_extend_lease(instance=host, user=alice, hours=hours)
    assert row.lease_expires_at == ran + timedelta(hours=72) == row.lease_end()
    instance_transition(instance=host, to=S.STOPPING, reason="stop", actor="x")
    instance_transition(instance=host, to=S.STOPPED, reason="stopped", actor="x")
    instance_transition(instance=host, to=S.STARTING, reason="start", actor="x")
    row, _ = instance_transition(instance=host, to=S.RUNNING, reason="again", actor="x")
    assert (row.lease_started_at, row.lease_expires_at) == (ran, ran + timedelta(hours=72))


def test_a_cloud_time_earlier_than_the_last_move_is_clamped(clock, host):
    later = timezone.now() + timedelta(minutes=1)
    instance_transition(instance=host, to=S.PROVISIONING, reason="a", actor="x", at=later)
    row, _ = instance_transition(
        instance=host, to=S.RUNNING, reason="b", actor="x", at=later - timedelta(hours=1)
    )
    assert row.status_changed_at == later
