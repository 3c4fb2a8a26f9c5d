"""Spot recovery: warnings, the three interruption policies, replacements and checkpoints."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import boto3
import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone
from moto import mock_aws

from instances import services, tasks
from instances.models import Instance, SimulatedHost
from instances.providers import spot_events
from instances.providers.base import ProviderTransientError, SpotWarning
from instances.providers.simulated import SPOT_INTERRUPTION_REASON, SimulatedProvider
from instances.services import quota_set
from portal.models import Notice

S = Instance.Status


@pytest.fixture(autouse=True)
def _checkpoints(settings, tmp_path):
    settings.PORTAL_CHECKPOINT_LOCAL_DIR = tmp_path / "checkpoints"
    settings.PORTAL_CHECKPOINT_S3_PREFIX = ""
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = 120


@pytest.fixture
def spot_host(running_host):
    def make(policy: str = "relaunch_spot", **overrides):
        return running_host(market="spot", interruption_policy=policy, **overrides)

    return make


def warn(instance: Instance) -> None:
    """The cloud warns (simulated_cloud warn), and the portal's drain hears it."""
    SimulatedProvider().warn(instance.cloud_id)
    services.spot_events_drain()


def provision(instance: Instance) -> Instance:
    return services.instance_provision(instance_id=instance.pk)


def test_a_warning_goes_on_the_timeline_and_to_the_owner_with_by_when_and_the_checkpoint(
    spot_host, alice, clock
):
    host = spot_host("notify")
    warn(host)
    host.refresh_from_db()
    due = timezone.now() + timedelta(seconds=120)
    assert host.spot_interruption_at == due
    note = host.events.get(reason__startswith="interruption warning")
    assert f"{due:%H:%M:%S} UTC" in note.reason
    assert "policy: notify" in note.reason
    assert host.events.filter(reason__startswith="rebalance recommendation").count() == 1
    notice = Notice.objects.get(user=alice, subject__contains="will be interrupted")
    assert f"{due:%H:%M}" in notice.subject
    assert host.order.checkpoint_uri in notice.body
    assert not host.replacements.exists()


@pytest.mark.parametrize(
    ("policy", "then"),
    [
        ("notify", "nothing is launched in its place"),
        ("relaunch_spot", "a replacement spot host starts at once"),
        ("fallback_on_demand", "a replacement on-demand host starts at once"),
    ],
)
def test_a_rebalance_recommendation_tells_the_owner_once_and_launches_nothing(
    spot_host, alice, policy, then
):
    host = spot_host(policy)
    rebalance = SpotWarning(cloud_id=host.cloud_id, kind=SpotWarning.REBALANCE, at=timezone.now())
    for _ in range(3):  # the queue delivers at least once
        services.spot_warning_receive(warning=rebalance)
    notices = Notice.objects.filter(user=alice, subject__contains="higher risk of interruption")
    assert notices.count() == 1
    assert "Save your work now" in notices[0].body
    assert then in notices[0].body
    assert host.order.checkpoint_uri in notices[0].body
    assert host.events.filter(reason__startswith="rebalance recommendation").count() == 1
    host.refresh_from_db()
    assert host.spot_warning_at is None
    assert not host.replacements.exists()


def test_the_warning_email_reaches_the_owner(spot_host, alice, django_capture_on_commit_callbacks):
    host = spot_host("notify")
    with django_capture_on_commit_callbacks(execute=True):
        warn(host)
    assert any("will be interrupted" in message.subject for message in mail.outbox)
    assert mail.outbox[-1].to == [alice.email]


def test_a_replacement_carries_on_the_lease_it_replaces_with_its_extensions(
    spot_host, alice, settings
):
    settings.PORTAL_LEASE_MAX_HOURS = 24
    host = spot_host("relaunch_spot")
    services.instance_extend_lease(instance=host, user=alice, hours=16)
    host.refresh_from_db()
    warn(host)
    new = Instance.objects.get(replaces=host)
    assert (new.lease_started_at, new.lease_hours_total) == (host.lease_started_at, 24)
    assert new.lease_expires_at == host.lease_started_at + timedelta(hours=24)
    with pytest.raises(services.LeaseLimitExceeded, match="cannot be extended further"):
        services.instance_extend_lease(instance=provision(new), user=alice, hours=1)


def test_relaunch_spot_starts_a_spot_replacement_at_the_warning_linked_both_ways(spot_host):
    host = spot_host("relaunch_spot")
    warn(host)
    new = Instance.objects.get(replaces=host)
    assert new.status == S.REQUESTED  # started now, while the original still runs
    host.refresh_from_db()
    assert host.status == S.RUNNING
    assert host.replaced_by == new
    assert (new.market, new.instance_type, new.image, new.project, new.owner, new.order) == (
        "spot",
        host.instance_type,
        host.image,
        host.project,
        host.owner,
        host.order,
    )
    assert new.client_token != host.client_token
    assert new.lease_expires_at == host.lease_expires_at
    assert host.events.filter(reason__startswith=f"replaced by {new.pk}").exists()
    assert new.events.get(new_status="requested").reason.startswith(f"replaces {host.pk}")
    new = provision(new)
    assert new.status == S.RUNNING
    # Away from the zone whose capacity is going.
    assert new.availability_zone != host.availability_zone


def test_the_replacement_gets_the_same_checkpoint_location_in_its_environment(spot_host):
    host = spot_host("relaunch_spot")
    uri = host.order.checkpoint_uri
    assert uri.startswith("file://") and uri.endswith(f"/{host.project.slug}/{host.order_id}/")
    warn(host)
    new = provision(Instance.objects.get(replaces=host))
    environments = [SimulatedHost.objects.get(cloud_id=i.cloud_id).environment for i in (host, new)]
    assert environments == [{"PORTAL_CHECKPOINT_URI": uri}] * 2


def test_the_checkpoint_location_is_an_s3_prefix_per_project_and_order(spot_host, settings):
    settings.PORTAL_CHECKPOINT_S3_PREFIX = "s3://lab-checkpoints/portal/"
    host = spot_host()
    assert host.order.checkpoint_uri == (
        f"s3://lab-checkpoints/portal/{host.project.slug}/{host.order_id}/"
    )


def test_a_repeated_warning_changes_nothing(spot_host, alice):
    host = spot_host("relaunch_spot")
    warn(host)
    events = host.events.count()
    for _ in range(3):
        services.spot_events_drain()
        services.spot_warning_receive(
            warning=SpotWarning(
                cloud_id=host.cloud_id, kind=SpotWarning.INTERRUPTION, at=timezone.now()
            )
        )
    assert host.events.count() == events
    assert Instance.objects.filter(replaces=host).count() == 1
    assert Notice.objects.filter(user=alice, subject__contains="will be interrupted").count() == 1


def test_fallback_on_demand_replaces_a_warned_spot_host_with_an_on_demand_one(spot_host):
    host = spot_host("fallback_on_demand")
    warn(host)
    new = Instance.objects.get(replaces=host)
    assert new.market == "on_demand"
    assert provision(new).status == S.RUNNING


def test_fallback_on_demand_with_the_quota_full_is_refused_with_a_notice_and_nothing_launches(
    spot_host, projects, ada, alice
):
    host = spot_host("fallback_on_demand")
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    warn(host)
    assert not Instance.objects.filter(replaces=host).exists()
    assert SimulatedHost.objects.count() == 1
    notice = Notice.objects.get(user=alice, subject__startswith="No replacement")
    assert "Quota exceeded" in notice.body and "1 GPUs" in notice.body
    assert host.events.filter(reason__startswith="no replacement: Quota exceeded").exists()


def test_a_replacement_refused_at_the_warning_starts_once_the_original_is_gone(
    spot_host, projects, ada, clock
):
    host = spot_host("relaunch_spot")
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    warn(host)
    assert not host.replacements.exists()
    clock.shift(timedelta(seconds=121))
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.TERMINATED
    new = Instance.objects.get(replaces=host)
    assert new.market == "spot"


def test_a_warned_host_says_one_thing_on_my_hosts_its_page_the_api_and_the_notices(
    spot_host, projects, ada, alice, client, api_as, clock
):
    host = spot_host("relaunch_spot")
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    warn(host)
    client.force_login(alice)
    said = "No replacement: Quota exceeded"
    rows = client.get("/hosts/rows/").content.decode()
    assert 'data-testid="spot-takeback">Interruption warned</span>' in rows
    assert "(in 2\xa0minutes)" in rows and said in rows
    panel = client.get(f"/hosts/{host.pk}/panel/").content.decode()
    banner = panel.split('data-testid="spot-warning"')[1].split("</div>")[0]
    assert said in banner and "starts at once" not in banner
    assert 'status-warned" data-status="running">Interruption warned</span></h1>' in panel
    api = api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()["spot_recovery"]
    assert (api["state"], api["label"]) == ("warned", "Interruption warned")
    assert api["next"].startswith(said)
    assert api["next"] in banner
    assert api_as(alice).get("/api/v1/instances/").json()["results"][0]["spot_recovery"] == api

    clock.shift(timedelta(seconds=121))  # the cloud takes it; the quota now admits the new one
    services.reconcile()
    new = Instance.objects.get(replaces=host)
    refused = Notice.objects.get(user=alice, link=f"/hosts/{host.pk}/", subject__contains="Repl")
    assert refused.subject.startswith("Replacement started for spot host")
    assert refused.read_at is not None and f"/hosts/{new.pk}/" in refused.body
    assert not Notice.objects.filter(user=alice, subject__startswith="No replacement").exists()


def test_an_interruption_without_warning_starts_the_replacement_at_reconcile(spot_host, alice):
    host = spot_host("relaunch_spot")
    SimulatedProvider().interrupt(host.cloud_id)
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.TERMINATED
    new = Instance.objects.get(replaces=host)
    notice = Notice.objects.get(user=alice, subject__startswith="Spot host interrupted")
    assert str(new.pk) in notice.body


def test_the_interruption_after_a_warning_does_not_launch_a_second_replacement(spot_host, clock):
    host = spot_host("relaunch_spot")
    warn(host)
    clock.shift(timedelta(seconds=121))
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.TERMINATED
    assert Instance.objects.filter(replaces=host).count() == 1


def test_notify_launches_nothing_and_the_notice_says_order_again(spot_host, alice):
    host = spot_host("notify")
    SimulatedProvider().interrupt(host.cloud_id)
    services.reconcile()
    assert Instance.objects.count() == 1
    notice = Notice.objects.get(user=alice, subject__startswith="Spot host interrupted")
    assert "Order again" in notice.body


def test_replacements_per_order_stop_at_the_configured_number(spot_host, settings, alice):
    settings.PORTAL_SPOT_MAX_REPLACEMENTS = 2
    host = spot_host("relaunch_spot")
    for _ in range(3):
        SimulatedProvider().interrupt(host.cloud_id)
        services.reconcile()
        following = Instance.objects.filter(replaces=host).first()
        if following is None:
            break
        host = provision(following)
    assert Instance.objects.filter(replaces__isnull=False).count() == 2
    notice = Notice.objects.get(user=alice, subject__startswith="No replacement")
    assert "PORTAL_SPOT_MAX_REPLACEMENTS" in notice.body


def test_a_spot_launch_without_capacity_falls_back_to_on_demand(place_order, alice, monkeypatch):
    order = place_order(alice, market="spot", interruption_policy="fallback_on_demand")
    spot = order.instances.get()

    def no_capacity(self, request):
        raise ProviderTransientError("no capacity", code="InsufficientInstanceCapacity")

    monkeypatch.setattr(SimulatedProvider, "launch", no_capacity)
    assert tasks.provision_instance.apply(args=[str(spot.pk)]).get() == S.FAILED
    new = Instance.objects.get(replaces=spot)
    assert new.market == "on_demand"
    assert "falling back to on-demand" in Instance.objects.get(pk=spot.pk).status_reason


def test_a_spot_replacement_without_capacity_retries_and_tells_the_owner_once(spot_host, alice):
    host = spot_host("relaunch_spot")
    warn(host)
    new = Instance.objects.get(replaces=host)
    for attempt in (1, 2):
        handled = services.spot_capacity_refused(instance_id=new.pk, attempts=attempt, final=False)
        assert handled is False  # the provision task retries with backoff
    assert Notice.objects.filter(user=alice, subject__startswith="No spot capacity").count() == 1


def test_the_simulated_market_warns_ahead_of_its_own_interruptions(spot_host, settings, clock):
    settings.PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR = 6  # every bucket decides: warn at once
    host = spot_host("notify")
    clock.shift(timedelta(seconds=1))
    services.spot_events_drain()
    cloud = SimulatedHost.objects.get(cloud_id=host.cloud_id)
    assert cloud.state == "running"
    assert cloud.interrupt_at - cloud.warned_at == timedelta(seconds=120)
    clock.shift(timedelta(seconds=121))
    assert SimulatedProvider().describe([host.cloud_id])[host.cloud_id].spot_interrupted


def test_the_simulated_cloud_command_warns_a_host(spot_host):
    host = spot_host("notify")
    out = StringIO()
    call_command("simulated_cloud", "warn", str(host.pk), stdout=out)
    assert f"{host.cloud_id}: warned; interrupted at" in out.getvalue()
    assert SimulatedHost.objects.get(cloud_id=host.cloud_id).interrupt_at is not None


# --- the queue ---------------------------------------------------------------------------------


def test_an_event_round_trips_as_eventbridge_sends_it():
    at = timezone.now().replace(microsecond=0)
    warning = SpotWarning(cloud_id="i-0abc", kind=SpotWarning.INTERRUPTION, at=at)
    body = json.loads(spot_events.event_body(warning, region="us-east-1"))
    assert body["detail-type"] == "EC2 Spot Instance Interruption Warning"
    assert body["detail"] == {"instance-id": "i-0abc", "instance-action": "terminate"}
    parsed = spot_events.parse_event(json.dumps(body))
    assert parsed == SpotWarning("i-0abc", SpotWarning.INTERRUPTION, at, at + timedelta(minutes=2))


@pytest.mark.parametrize(
    "body", ["", "not json", "[]", '{"detail-type": "EC2 Instance State-change Notification"}']
)
def test_other_messages_are_not_warnings(body):
    assert spot_events.parse_event(body) is None


@pytest.fixture
def sqs_queue(settings, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="spot-events")["QueueUrl"]
        settings.PORTAL_SPOT_EVENTS_QUEUE_URL = url
        settings.PORTAL_SPOT_EVENTS_ENDPOINT_URL = ""
        yield client, url


def test_warnings_come_through_the_sqs_queue_and_are_deleted_once_handled(spot_host, sqs_queue):
    client, url = sqs_queue
    host = spot_host("relaunch_spot")
    client.send_message(QueueUrl=url, MessageBody="garbage")
    SimulatedProvider().warn(host.cloud_id)  # posts rebalance + interruption to the queue
    assert services.spot_events_drain() == 2
    assert Instance.objects.filter(replaces=host).count() == 1
    attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


# --- the API and the page ---------------------------------------------------------------------


def test_the_host_detail_gives_checkpoint_replaces_and_replaced_by(spot_host, api_as, alice):
    host = spot_host("relaunch_spot")
    warn(host)
    new = Instance.objects.get(replaces=host)
    old = api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()
    assert old["checkpoint_uri"] == host.order.checkpoint_uri
    assert (old["replaces"], old["replaced_by"]) == (None, str(new.pk))
    assert old["spot_interruption_at"] is not None
    fresh = api_as(alice).get(f"/api/v1/instances/{new.pk}/").json()
    assert (fresh["replaces"], fresh["replaced_by"]) == (str(host.pk), None)
    assert fresh["checkpoint_uri"] == old["checkpoint_uri"]


def test_the_host_page_shows_the_warning_the_link_and_the_checkpoint_snippet(
    spot_host, client, alice
):
    host = spot_host("relaunch_spot")
    warn(host)
    new = Instance.objects.get(replaces=host)
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/panel/").content.decode()
    assert 'data-testid="spot-warning"' in page
    assert f'href="/hosts/{new.pk}/"' in page
    assert "tf.keras.callbacks.BackupAndRestore(backup_dir=" in page
    assert host.order.checkpoint_uri.removeprefix("file://") in page
    page = client.get(f"/hosts/{new.pk}/panel/").content.decode()
    assert f'href="/hosts/{host.pk}/"' in page


def test_an_interruption_seen_while_the_host_shuts_down_is_an_interruption(spot_host, alice):
    """EC2 shows an interrupted spot host as shutting-down first; the portal read that as a
    plain termination: no interrupted state, no notice, no replacement."""
    host = spot_host("relaunch_spot")
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(
        state=SimulatedHost.State.SHUTTING_DOWN,
        state_reason=SPOT_INTERRUPTION_REASON,
        state_changed_at=timezone.now(),
        settles_at=None,
    )
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.INTERRUPTED
    replacement = Instance.objects.get(replaces=host)
    assert (
        Notice.objects.filter(user=alice, subject__startswith="Spot host interrupted").count() == 1
    )
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(
        state=SimulatedHost.State.TERMINATED
    )
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.TERMINATED
    assert list(Instance.objects.filter(replaces=host)) == [replacement]
    assert (
        Notice.objects.filter(user=alice, subject__startswith="Spot host interrupted").count() == 1
    )


def test_a_host_refused_a_replacement_while_it_counted_gets_one_once_ec2_removes_it(
    spot_host, alice, ada, projects
):
    """Refused at the warning (the warned host counts against the quota), refused again at
    shutting-down (an interrupted host still counts): the replacement starts once it is gone."""
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    host = spot_host("relaunch_spot")
    warn(host)
    assert not Instance.objects.filter(replaces=host).exists()
    cloud = SimulatedHost.objects.filter(cloud_id=host.cloud_id)
    cloud.update(
        state=SimulatedHost.State.SHUTTING_DOWN,
        state_reason=SPOT_INTERRUPTION_REASON,
        state_changed_at=timezone.now(),
        settles_at=None,
    )
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.INTERRUPTED and not Instance.objects.filter(replaces=host).exists()
    # A late warning or another reconcile acts no more; the page no longer says "any moment".
    assert services.spot_takeback(host) is None
    cloud.update(state=SimulatedHost.State.TERMINATED)
    services.reconcile()
    host.refresh_from_db()
    assert host.status == S.TERMINATED
    assert Instance.objects.filter(replaces=host).count() == 1
