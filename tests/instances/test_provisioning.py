"""The worker side on the simulated cloud: provision, retries, failures, actions, reconcile."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditEvent
from instances import services, tasks
from instances.models import Image, Instance, SimulatedHost
from instances.providers.base import TAG_INSTANCE, ProviderPermanentError
from instances.providers.simulated import SimulatedProvider

S = Instance.Status


@pytest.fixture
def requested(place_order, alice):
    def make(**overrides):
        return place_order(alice, **overrides).instances.get()

    return make


def live_cloud_hosts(instance) -> int:
    return (
        SimulatedHost.objects.filter(portal_instance=str(instance.pk))
        .exclude(state="terminated")
        .count()
    )


def test_provisioning_launches_one_tagged_host_and_records_the_clouds_time(clock, requested):
    instance = requested()
    row = services.instance_provision(instance_id=instance.pk)
    host = SimulatedHost.objects.get(cloud_id=row.cloud_id)
    assert row.status == S.RUNNING
    assert host.client_token == instance.client_token
    assert host.tags[TAG_INSTANCE] == str(instance.pk)
    assert host.tags["portal:project"] == "vision-lab" and host.tags["portal:owner"] == "alice"
    running = row.events.get(new_status=S.RUNNING)
    assert running.at == host.state_changed_at
    assert row.public_ip == host.public_ip


def test_provisioning_twice_launches_nothing_more(requested):
    instance = requested()
    services.instance_provision(instance_id=instance.pk)
    Instance.objects.filter(pk=instance.pk).update(status=S.PROVISIONING, cloud_id=None)
    services.instance_provision(instance_id=instance.pk)
    assert SimulatedHost.objects.count() == 1


def test_a_host_still_booting_stays_provisioning_until_the_cloud_says_running(
    clock, requested, settings
):
    settings.PORTAL_SIMULATED_BOOT_SECONDS = 60
    instance = requested()
    row = services.instance_provision(instance_id=instance.pk)
    assert row.status == S.PROVISIONING and row.cloud_id
    booted = timezone.now()
    SimulatedHost.objects.filter(cloud_id=row.cloud_id).update(settles_at=booted)
    row = services.instance_sync(instance_id=instance.pk)
    assert row.status == S.RUNNING
    assert row.events.get(new_status=S.RUNNING).at == booted


def test_no_capacity_is_retried_then_fails_with_a_readable_reason(requested, settings, catalog):
    settings.PORTAL_PROVISION_MAX_RETRIES = 3
    instance = requested(instance_type=catalog["p5e.48xlarge"])
    for n in range(2):  # the simulated cloud has room for two p5e.48xlarge
        other = replace(services.launch_request(instance), client_token=f"other-{n}", tags={})
        SimulatedProvider().launch(other)
    result = tasks.provision_instance.apply(args=[str(instance.pk)])
    assert result.get() == S.FAILED
    instance.refresh_from_db()
    assert instance.status == S.FAILED
    assert instance.status_reason.startswith("The cloud has no free p5e.48xlarge capacity")
    assert "gave up after 3 attempts" in instance.status_reason
    assert "InsufficientInstanceCapacity" in instance.status_reason


def test_a_bad_image_fails_at_once_and_says_so(requested):
    instance = requested()
    Image.objects.filter(pk=instance.image_id).update(
        provider_image_ids={"us-east-1": "ami-00000000000000bad"}
    )
    assert tasks.provision_instance.apply(args=[str(instance.pk)]).get() == S.FAILED
    instance.refresh_from_db()
    assert "does not exist in us-east-1" in instance.status_reason
    assert SimulatedHost.objects.count() == 0


def test_a_host_terminated_while_its_launch_was_in_flight_does_not_outlive_its_row(
    requested, alice
):
    instance = requested()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    real_find = SimulatedProvider.find_tagged

    def user_terminates_meanwhile(self, uuid=None):
        found = real_find(self, uuid)
        services.instance_request_terminate(
            instance=Instance.objects.get(pk=instance.pk), user=alice
        )
        return found

    SimulatedProvider.find_tagged = user_terminates_meanwhile
    try:
        services.instance_provision(instance_id=instance.pk)
    finally:
        SimulatedProvider.find_tagged = real_find
    assert live_cloud_hosts(instance) == 0
    assert Instance.objects.get(pk=instance.pk).status == S.TERMINATED


def test_terminating_before_any_launch_ends_without_the_cloud(requested, alice):
    instance = requested()
    services.instance_request_terminate(instance=instance, user=alice)
    row = services.instance_cloud_action(instance_id=instance.pk, action="terminate")
    assert row.status == S.TERMINATED
    assert row.events.get(new_status=S.TERMINATED).reason == "nothing was running in the cloud yet"
    assert services.instance_provision(instance_id=instance.pk).status == S.TERMINATED
    assert SimulatedHost.objects.count() == 0


# --- reconcile ---------------------------------------------------------------------------------


def age(instance, seconds: int) -> None:
    Instance.objects.filter(pk=instance.pk).update(
        status_changed_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_reconcile_reenqueues_a_request_whose_task_was_lost(
    clock, requested, django_capture_on_commit_callbacks, settings
):
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 60
    fresh, lost = requested(), requested()
    age(lost, 120)
    with django_capture_on_commit_callbacks() as callbacks:
        report = services.reconcile()
    assert report.enqueued == [str(lost.pk)]
    assert len(callbacks) == 1 and callbacks[0].func == tasks.provision_instance.delay
    assert callbacks[0].args == (str(lost.pk),)
    assert lost.events.filter(reason__startswith="re-enqueued").exists()
    assert not fresh.events.filter(reason__startswith="re-enqueued").exists()


def test_reconcile_adopts_a_host_the_database_lost_track_of(requested):
    instance = requested()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    host = SimulatedProvider().launch(services.launch_request(instance))  # then the worker died
    report = services.reconcile()
    assert report.adopted == [host.cloud_id]
    instance.refresh_from_db()
    assert (instance.cloud_id, instance.status) == (host.cloud_id, S.RUNNING)
    assert instance.events.filter(reason=f"adopted cloud host {host.cloud_id}").exists()


def test_reconcile_terminates_orphans_after_the_grace_period(clock, requested, settings):
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    instance = requested()
    services.instance_transition(instance=instance, to=S.FAILED, reason="x", actor="t")
    host = SimulatedProvider().launch(services.launch_request(instance))
    assert services.reconcile().orphans_terminated == []  # too young: maybe still recording
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(
        launched_at=timezone.now() - timedelta(minutes=10)
    )
    assert services.reconcile().orphans_terminated == [host.cloud_id]
    assert live_cloud_hosts(instance) == 0
    assert instance.events.filter(reason=f"terminated orphan host {host.cloud_id}").exists()


def test_reconcile_marks_ghosts_terminated_when_last_seen(clock, running_host):
    instance = running_host()
    age(instance, 3600)  # running for an hour, last seen alive seven minutes ago
    seen = timezone.now() - timedelta(minutes=7)
    Instance.objects.filter(pk=instance.pk).update(last_seen_at=seen)
    SimulatedHost.objects.filter(cloud_id=instance.cloud_id).delete()
    report = services.reconcile()
    assert report.ghosts == [str(instance.pk)]
    event = instance.events.get(new_status=S.TERMINATED)
    assert event.at == seen and event.actor == "system:reconcile"
    # The task's change is in the audit log too, under the task's name.
    row = AuditEvent.objects.get(
        object_ref=f"instance:{instance.pk}", actor_username="system:reconcile"
    )
    assert row.action == "running->terminated"
    assert "the cloud no longer knows this host" in row.body_summary


def test_a_host_missing_for_less_than_the_grace_is_not_a_ghost(clock, running_host, settings):
    """EC2's describe lags a launch: a host just seen and missing once is left alone."""
    settings.PORTAL_GHOST_GRACE_SECONDS = 180
    instance = running_host()
    Instance.objects.filter(pk=instance.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=60)
    )
    SimulatedHost.objects.filter(cloud_id=instance.cloud_id).delete()
    assert services.reconcile().ghosts == []
    instance.refresh_from_db()
    assert instance.status == S.RUNNING
    Instance.objects.filter(pk=instance.pk).update(
        last_seen_at=timezone.now() - timedelta(seconds=181)
    )
    assert services.reconcile().ghosts == [str(instance.pk)]


def test_reconcile_notices_a_host_killed_behind_the_portals_back(running_host):
    instance = running_host()
    call_command("simulated_cloud", "terminate", instance.cloud_id, stdout=io.StringIO())
    killed_at = SimulatedHost.objects.get(cloud_id=instance.cloud_id).state_changed_at
    services.reconcile()
    instance.refresh_from_db()
    assert instance.status == S.TERMINATED
    assert instance.events.get(new_status=S.TERMINATED).at == killed_at


def test_reconcile_notices_a_spot_interruption(running_host):
    instance = running_host(market="spot")
    call_command("simulated_cloud", "interrupt", str(instance.pk), stdout=io.StringIO())
    services.reconcile()
    statuses = list(instance.events.values_list("new_status", flat=True))
    assert statuses[-2:] == [S.INTERRUPTED, S.TERMINATED]
    assert "spot capacity reclaimed" in instance.events.get(new_status=S.INTERRUPTED).reason
    from portal.models import Notice

    notice = Notice.objects.get(user=instance.owner)
    assert notice.subject == "Spot host interrupted: g5.xlarge in vision-lab"
    services.reconcile()  # seen again: told once
    assert Notice.objects.filter(user=instance.owner).count() == 1


def test_interrupting_an_on_demand_host_is_refused(running_host):
    instance = running_host()
    with pytest.raises(CommandError, match="is not a spot host"):
        call_command("simulated_cloud", "interrupt", instance.cloud_id)


def test_reconcile_follows_a_host_stopped_behind_the_portals_back(running_host):
    instance = running_host()
    SimulatedProvider().stop(instance.cloud_id)
    services.reconcile()
    instance.refresh_from_db()
    assert instance.status == S.STOPPED
    assert list(instance.events.values_list("new_status", flat=True))[-2:] == [
        S.STOPPING,
        S.STOPPED,
    ]


def test_reconcile_on_a_quiet_cloud_does_nothing(running_host):
    running_host()
    assert services.reconcile().actions() == 0


def test_the_same_token_with_other_parameters_is_refused_by_the_simulated_cloud(requested):
    instance = requested()
    request = services.launch_request(instance)
    SimulatedProvider().launch(request)
    other = replace(request, instance_type="g6.xlarge")
    with pytest.raises(ProviderPermanentError) as error:
        SimulatedProvider().launch(other)
    assert error.value.code == "IdempotentParameterMismatch"


def test_a_host_whose_lease_ended_is_terminated(
    boundary_clock, running_host, django_capture_on_commit_callbacks
):
    ended = running_host()  # an 8 h lease from now
    boundary_clock.shift(timedelta(hours=1))
    current = running_host()  # an hour younger
    boundary_clock.shift(timedelta(hours=7, seconds=-1))
    assert services.leases_expire() == []  # a second before the first lease ends
    boundary_clock.shift(timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert services.leases_expire() == [str(ended.pk)]
    assert [c.args for c in callbacks] == [(str(ended.pk),)]
    ended.refresh_from_db()
    current.refresh_from_db()
    assert ended.status == S.TERMINATING and current.status == S.RUNNING
    event = ended.events.get(new_status=S.TERMINATING)
    assert (event.reason, event.actor) == ("the 8 h lease ended", "system:lease")
    assert services.instance_cloud_action(instance_id=ended.pk, action="terminate").status == (
        S.TERMINATED
    )
    assert services.leases_expire() == []


def test_the_provisioning_queue_is_configured_not_to_lose_or_double_work(settings):
    """acks_late + reject on worker lost: a task a dying worker held is delivered again;
    prefetch 1: a worker holds no launches it is not running; EC2 calls retry adaptively."""
    from instances.providers.ec2 import EC2Provider
    from portal.celery import app

    for task in (tasks.provision_instance, tasks.stop_instance, tasks.start_instance):
        assert (task.acks_late, task.reject_on_worker_lost) == (True, True), task.name
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_routes["instances.tasks.provision_instance"] == {"queue": "provisioning"}
    assert EC2Provider().client.meta.config.retries["mode"] == "adaptive"
