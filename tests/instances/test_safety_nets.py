"""Safety nets around orders and hosts: what stops a double click, a second approver, a
neighbouring deployment, a refusing cloud or a lost task from doing harm.

1. An order already decided cannot be decided again: 409 ``already_decided``, nothing changes.
2. The order page carries a one-time ``submission`` key: posting the same form twice (a double
   click, a resubmitted page) places one order.
3. Every cloud host is tagged with its deployment; reconcile neither adopts nor ends another
   deployment's hosts (staging and production may share a cloud account).
4. A stop or start the cloud refuses for good puts the host back where it is, and says why.
5. Reconcile sends lost work again a bounded number of times, then fails the launch with a reason.
6. A second live host tagged with a live row's id is a known duplicate: reconcile ends it at the
   next pass, without the orphan grace, and says so on the row's timeline.
"""

from __future__ import annotations

import importlib
import re
import threading
import uuid
from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.db import close_old_connections, connection
from django.db.models import F
from django.test import Client
from django.utils import timezone

from instances import services, tasks
from instances.models import Image, Instance, InstanceEvent, Order, OrderEvent, SimulatedHost
from instances.providers.base import (
    TAG_DEPLOYMENT,
    TAG_INSTANCE,
    TAG_OWNER,
    TAG_PROJECT,
    LaunchRequest,
    ProviderPermanentError,
    ProviderTransientError,
)
from instances.providers.simulated import SimulatedProvider
from instances.services import approval_policy_set
from portal.lib.errors import Conflict
from portal.models import Membership, Notice
from portal.services import membership_set
from tests.conftest import ED25519

# The module (its name is shadowed by the function it exports on the package).
reconcile_module = importlib.import_module("instances.services.reconcile")
S = Instance.Status
ORDERS = "/api/v1/orders/"
INSTANCES = "/api/v1/instances/"


# --- 1. an order is decided once ---------------------------------------------------------------


@pytest.fixture
def policy(projects, ada):
    """vision-lab holds orders of more than two GPUs for approval."""
    return approval_policy_set(project=projects["vision-lab"], actor=ada, gpus_above=2)


@pytest.fixture
def waiting(policy, place_order, bob):
    """bob's order of three one-GPU hosts, waiting for an approver."""
    order = place_order(bob, count=3)
    assert order.status == Order.Status.PENDING_APPROVAL
    return order


def decision_of(order: Order) -> tuple:
    order.refresh_from_db()
    return (order.status, order.decided_by_id, order.decided_at, order.decision_reason)


def test_approving_an_order_twice_answers_409_and_changes_nothing(waiting, ada, bob, api_as):
    as_ada = api_as(ada)
    first = as_ada.post(f"{ORDERS}{waiting.pk}/approve/", {"reason": "go"}, format="json")
    assert first.status_code == 200, first.json()
    decided = decision_of(waiting)
    assert decided[:2] == (Order.Status.APPROVED, ada.pk)
    events = OrderEvent.objects.filter(order=waiting).count()

    again = as_ada.post(f"{ORDERS}{waiting.pk}/approve/", {"reason": "go again"}, format="json")

    assert again.status_code == 409, again.json()
    assert again.json()["code"] == "already_decided"
    assert "already approved by ada; nothing was changed" in again.json()["detail"]
    assert decision_of(waiting) == decided
    assert Instance.objects.filter(order=waiting).count() == 3  # not six
    assert OrderEvent.objects.filter(order=waiting).count() == events
    assert Notice.objects.filter(user=bob, subject__startswith="Approved").count() == 1


def test_rejecting_an_approved_order_answers_409_and_changes_nothing(waiting, ada, bob, api_as):
    as_ada = api_as(ada)
    assert as_ada.post(f"{ORDERS}{waiting.pk}/approve/").status_code == 200
    decided = decision_of(waiting)

    response = as_ada.post(
        f"{ORDERS}{waiting.pk}/reject/", {"reason": "changed my mind"}, format="json"
    )

    assert response.status_code == 409, response.json()
    assert response.json()["code"] == "already_decided"
    assert decision_of(waiting) == decided
    assert Instance.objects.filter(order=waiting, status=S.REQUESTED).count() == 3
    assert not Notice.objects.filter(user=bob, subject__startswith="Rejected").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_provision_the_order_once(policy, place_order, ada, alice, bob):
    """The second approver waits for the first one's lock, then is told it was decided."""
    membership_set(project=policy.project, user=alice, role=Membership.Role.MANAGER)
    for _ in range(5):
        order = place_order(bob, count=3)
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def approve(user, order=order, barrier=barrier, outcomes=outcomes) -> None:
            close_old_connections()
            try:
                barrier.wait()
                services.order_approve(order=order, user=user)
                outcomes.append("approved")
            except Conflict as error:
                outcomes.append(error.code)
            finally:
                connection.close()

        threads = [threading.Thread(target=approve, args=(user,)) for user in (ada, alice)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["already_decided", "approved"]
        assert Instance.objects.filter(order=order).count() == 3
        assert OrderEvent.objects.filter(order=order, new_status="approved").count() == 1


# --- 2. the order page places one order per rendered form --------------------------------------


@pytest.fixture
def browser(alice, catalog):
    client = Client()
    client.force_login(alice)
    return client


def submission_key(page) -> str:
    found = re.search(
        r'<input type="hidden" name="submission" value="([0-9a-f-]{36})"', page.content.decode()
    )
    assert found, "the order form carries no hidden submission key"
    return found.group(1)


def order_form(submission: str) -> dict:
    return {
        "submission": submission,
        "project": "vision-lab",
        "image": "tf-2.17-cuda12.3",
        "market": "on_demand",
        "count": 2,
        "lease_hours": 8,
        "ssh_public_key": ED25519,
        "interruption_policy": "",
    }


def test_a_double_click_on_the_order_page_places_one_order(browser):
    page = browser.get("/catalog/g5.xlarge/order/")
    assert page.status_code == 200
    form = order_form(submission_key(page))

    first = browser.post("/catalog/g5.xlarge/order/", form)
    second = browser.post("/catalog/g5.xlarge/order/", form)

    order = Order.objects.get()  # exactly one
    assert order.idempotency_key == f"page-{form['submission']}"
    assert Instance.objects.filter(order=order).count() == 2
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/hosts/?new={order.pk}"


def test_each_rendering_of_the_order_page_is_a_new_order(browser):
    """The key belongs to one rendered form, not to the user: ordering again on purpose works."""
    first_key = submission_key(browser.get("/catalog/g5.xlarge/order/"))
    second_key = submission_key(browser.get("/catalog/g5.xlarge/order/"))
    assert first_key != second_key
    browser.post("/catalog/g5.xlarge/order/", order_form(first_key))
    browser.post("/catalog/g5.xlarge/order/", order_form(second_key))
    assert Order.objects.count() == 2


# --- 3. deployment isolation -------------------------------------------------------------------


def launch_as(deployment: str, settings, *, instance_uuid: str | None = None) -> SimulatedHost:
    """Launch a g5.xlarge on the shared cloud as the portal of ``deployment`` would, and let it
    age past the orphan grace."""
    ours = settings.PORTAL_DEPLOYMENT
    instance_uuid = instance_uuid or str(uuid.uuid4())
    request = LaunchRequest(
        client_token=f"{deployment}-{uuid.uuid4().hex}",
        instance_uuid=instance_uuid,
        instance_type="g5.xlarge",
        image_id=Image.objects.get(name="tf-2.17-cuda12.3").image_id_for(settings.PORTAL_REGION),
        market="on_demand",
        ssh_public_key=ED25519,
        tags={TAG_INSTANCE: instance_uuid, TAG_PROJECT: "vision-lab", TAG_OWNER: "alice"},
    )
    settings.PORTAL_DEPLOYMENT = deployment
    try:
        host = SimulatedProvider().launch(request)
    finally:
        settings.PORTAL_DEPLOYMENT = ours
    long_ago = timezone.now() - timedelta(seconds=settings.PORTAL_ORPHAN_GRACE_SECONDS + 60)
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(launched_at=long_ago)
    row = SimulatedHost.objects.get(cloud_id=host.cloud_id)
    assert row.tags[TAG_DEPLOYMENT] == deployment
    return row


def test_every_host_the_portal_launches_is_tagged_with_its_deployment(running_host, settings):
    instance = running_host()
    host = SimulatedHost.objects.get(cloud_id=instance.cloud_id)
    assert host.tags[TAG_DEPLOYMENT] == settings.PORTAL_DEPLOYMENT == "default"
    assert host.tags[TAG_INSTANCE] == str(instance.pk)


@pytest.mark.usefixtures("clock")  # ages against a frozen now
def test_reconcile_does_not_end_another_deployments_host(catalog, settings):
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    theirs = launch_as("staging", settings)
    ours = launch_as(settings.PORTAL_DEPLOYMENT, settings)  # the control: a real orphan of ours

    report = services.reconcile()

    assert report.orphans_terminated == [ours.cloud_id]
    theirs.refresh_from_db()
    ours.refresh_from_db()
    assert theirs.state == SimulatedHost.State.RUNNING
    assert ours.state == SimulatedHost.State.TERMINATED
    assert not Instance.objects.filter(cloud_id=theirs.cloud_id).exists()


@pytest.mark.usefixtures("clock")  # ages against a frozen now
def test_reconcile_does_not_adopt_another_deployments_host(place_order, alice, settings):
    """Staging restored from a copy of production's database knows production's instance ids:
    a staging host tagged with one of ours is still not ours."""
    instance = place_order(alice).instances.get()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    theirs = launch_as("staging", settings, instance_uuid=str(instance.pk))

    report = services.reconcile()

    assert report.adopted == [] and report.orphans_terminated == []
    instance.refresh_from_db()
    assert instance.cloud_id is None and instance.status == S.PROVISIONING
    theirs.refresh_from_db()
    assert theirs.state == SimulatedHost.State.RUNNING
    # The provisioner, too, launches a host of its own rather than take theirs.
    row = services.instance_provision(instance_id=instance.pk)
    assert row.cloud_id != theirs.cloud_id
    assert SimulatedHost.objects.get(cloud_id=row.cloud_id).tags[TAG_DEPLOYMENT] == "default"


# --- 4. a refused stop or start reverts the move -----------------------------------------------


def refused(done: str):
    """A provider method that refuses for good, as EC2 does (IncorrectInstanceState)."""

    def refuse(self, cloud_id):
        raise ProviderPermanentError(
            f"The instance '{cloud_id}' is not in a state from which it can be {done}.",
            code="IncorrectInstanceState",
        )

    return refuse


def test_a_stop_the_cloud_refuses_puts_the_host_back_to_running_and_says_why(
    running_host, alice, api_as, browser, monkeypatch, django_capture_on_commit_callbacks
):
    instance = running_host()
    as_alice = api_as(alice)
    with django_capture_on_commit_callbacks(execute=False):
        response = as_alice.post(f"{INSTANCES}{instance.pk}/stop/")
    assert response.status_code == 202 and response.json()["status"] == "stopping"
    monkeypatch.setattr(SimulatedProvider, "stop", refused("stopped"))

    assert tasks.stop_instance.apply(args=[str(instance.pk)]).get() == S.RUNNING

    instance.refresh_from_db()
    assert instance.status == S.RUNNING
    event = instance.events.get(old_status=S.STOPPING, new_status=S.RUNNING)
    assert event.actor == "system:stop"
    assert event.reason.startswith("the cloud refused to stop it: The instance")
    assert SimulatedHost.objects.get(cloud_id=instance.cloud_id).state == "running"
    # What alice sees: the host is running, and why her stop did not happen.
    body = as_alice.get(f"{INSTANCES}{instance.pk}/").json()
    assert body["status"] == "running"
    assert body["status_reason"] == event.reason
    assert body["events"][-1]["reason"] == event.reason
    assert body["ssh_command"]  # still usable
    page = browser.get(f"/hosts/{instance.pk}/")
    assert page.status_code == 200
    assert "the cloud refused to stop it" in page.content.decode()


def test_a_start_the_cloud_refuses_puts_the_host_back_to_stopped_and_says_why(
    running_host, alice, api_as, monkeypatch
):
    instance = running_host()
    SimulatedProvider().stop(instance.cloud_id)
    instance = services.instance_sync(instance_id=instance.pk)
    assert instance.status == S.STOPPED
    services.instance_request_start(instance=instance, user=alice)
    monkeypatch.setattr(SimulatedProvider, "start", refused("started"))

    assert tasks.start_instance.apply(args=[str(instance.pk)]).get() == S.STOPPED

    instance.refresh_from_db()
    assert instance.status == S.STOPPED
    event = instance.events.get(old_status=S.STARTING, new_status=S.STOPPED)
    assert event.reason.startswith("the cloud refused to start it:")
    assert api_as(alice).get(f"{INSTANCES}{instance.pk}/").json()["status_reason"] == event.reason


# --- 5. reconcile re-enqueues lost work a bounded number of times ------------------------------


def time_passes(instance: Instance, seconds: int) -> None:
    """Move the instance's whole history back: as if ``seconds`` went by with nothing done."""
    back = timedelta(seconds=seconds)
    Instance.objects.filter(pk=instance.pk).update(status_changed_at=F("status_changed_at") - back)
    InstanceEvent.objects.filter(instance=instance).update(at=F("at") - back)


@pytest.mark.usefixtures("clock")  # ages against a frozen now
def test_a_launch_nobody_carries_out_is_sent_again_a_few_times_then_fails(
    place_order, alice, settings, monkeypatch
):
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 60
    settings.PORTAL_RECONCILE_MAX_RETRIES = 3
    instance = place_order(alice).instances.get()  # and its provisioning task is lost
    sent: list[tuple] = []
    monkeypatch.setattr(reconcile_module, "enqueue", lambda task, *args: sent.append((task, *args)))
    assert services.reconcile().enqueued == []  # just ordered: its task may still come

    for attempt in range(1, 4):
        time_passes(instance, 61)
        assert services.reconcile().enqueued == [str(instance.pk)]
        assert services.reconcile().enqueued == []  # sent a moment ago: give it time
        assert len(sent) == attempt
    time_passes(instance, 61)
    assert services.reconcile().enqueued == []
    time_passes(instance, 61)
    assert services.reconcile().enqueued == []

    assert sent == [(tasks.provision_instance.name, str(instance.pk))] * 3
    instance.refresh_from_db()
    assert instance.status == S.FAILED
    assert instance.status_reason == (
        "No worker carried out the launch after 3 tries; order again."
    )
    assert instance.events.filter(reason__startswith="re-enqueued").count() == 3
    failed = instance.events.get(new_status=S.FAILED)
    assert (failed.old_status, failed.actor) == (S.REQUESTED, "system:provision")


@pytest.mark.usefixtures("clock")  # ages against a frozen now
def test_a_stop_nobody_carries_out_is_handed_to_the_admins_once(
    running_host, alice, ada, settings, monkeypatch
):
    settings.PORTAL_RECONCILE_STUCK_SECONDS = 60
    settings.PORTAL_RECONCILE_MAX_RETRIES = 2
    instance = running_host()
    sent: list[tuple] = []
    for module in (reconcile_module, services.hosts):
        monkeypatch.setattr(module, "enqueue", lambda task, *args: sent.append((task, *args)))
    services.instance_request_stop(instance=instance, user=alice)  # and the stop task is lost
    for _ in range(2):
        time_passes(instance, 61)
        assert services.reconcile().enqueued == [str(instance.pk)]
    for _ in range(3):
        time_passes(instance, 61)
        assert services.reconcile().enqueued == []

    # The stop and its two re-sends; then the host stays stopping, for a person to look at.
    assert sent == [(tasks.stop_instance.name, str(instance.pk))] * 3
    instance.refresh_from_db()
    assert instance.status == S.STOPPING
    gave_up = instance.events.filter(reason__contains="giving up")
    assert [event.reason for event in gave_up] == [
        "re-enqueued 2 times, giving up: no worker carried out the stop"
    ]
    subject = f"No worker carried out the stop of host {str(instance.pk)[:8]}"
    told = Notice.objects.filter(subject=subject).values_list("user__username", flat=True)
    assert sorted(told) == ["ada", "alice"]


# --- 6. a second host of one instance is ended at the next pass --------------------------------


def second_host(instance: Instance, settings, *, seconds_ago: int = 0) -> SimulatedHost:
    """What a cloud that ignores the ClientToken (moto) makes when two workers launch for one
    instance: another host with the same tags, launched ``seconds_ago``."""
    settings.PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = True
    try:
        host = SimulatedProvider().launch(services.launch_request(instance))
    finally:
        settings.PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = False
    SimulatedHost.objects.filter(cloud_id=host.cloud_id).update(
        launched_at=timezone.now() - timedelta(seconds=seconds_ago)
    )
    return SimulatedHost.objects.get(cloud_id=host.cloud_id)


def cloud_state(cloud_id: str) -> str:
    return SimulatedHost.objects.get(cloud_id=cloud_id).state


def test_a_duplicate_younger_than_the_orphan_grace_is_terminated_at_the_next_pass(
    running_host, settings
):
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    instance = running_host()
    double = second_host(instance, settings, seconds_ago=5)

    report = services.reconcile()

    assert report.doubles_terminated == [double.cloud_id]
    assert report.orphans_terminated == [] and report.adopted == []
    assert cloud_state(double.cloud_id) in ("shutting-down", "terminated")
    assert cloud_state(instance.cloud_id) == "running"
    instance.refresh_from_db()
    assert instance.status == S.RUNNING
    note = instance.events.get(reason__startswith="terminated duplicate")
    assert note.reason == (
        f"terminated duplicate host {double.cloud_id} (this host is {instance.cloud_id})"
    )
    assert note.actor == "system:reconcile"
    assert services.reconcile().doubles_terminated == []  # once


def test_a_launch_in_flight_with_two_hosts_adopts_the_earliest_and_ends_the_other(
    place_order, alice, settings, monkeypatch
):
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    instance = place_order(alice).instances.get()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    made = [second_host(instance, settings) for _ in range(3)]
    # The earliest launched has the largest id, and the cloud lists it last: the choice is by
    # launch time, not by id or listing order.
    hosts = sorted(made, key=lambda h: h.cloud_id, reverse=True)
    for ago, host in zip((30, 20, 10), hosts, strict=True):
        SimulatedHost.objects.filter(pk=host.pk).update(
            launched_at=timezone.now() - timedelta(seconds=ago)
        )
    earliest = hosts[0]
    real_find = SimulatedProvider.find_tagged
    monkeypatch.setattr(
        SimulatedProvider,
        "find_tagged",
        lambda self, instance_uuid=None: real_find(self, instance_uuid)[::-1],
    )

    report = services.reconcile()

    assert report.adopted == [earliest.cloud_id]
    assert sorted(report.doubles_terminated) == sorted(h.cloud_id for h in hosts[1:])
    instance.refresh_from_db()
    assert (instance.cloud_id, instance.status) == (earliest.cloud_id, S.RUNNING)
    assert [cloud_state(h.cloud_id) for h in hosts] == ["running", "terminated", "terminated"]
    reasons = list(instance.events.order_by("pk").values_list("reason", flat=True))
    assert f"adopted cloud host {earliest.cloud_id}" in reasons
    assert sum(r.startswith("terminated duplicate host") for r in reasons) == 2
    # The provisioner, run late for the same instance, keeps the host reconcile chose.
    assert services.instance_provision(instance_id=instance.pk).cloud_id == earliest.cloud_id


def test_a_host_legitimately_adopted_is_kept(place_order, alice, settings):
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 300
    instance = place_order(alice).instances.get()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    only = second_host(instance, settings, seconds_ago=1)  # the worker died before recording

    first, second = services.reconcile(), services.reconcile()

    assert first.adopted == [only.cloud_id] and first.doubles_terminated == []
    assert second.actions() == 0
    assert cloud_state(only.cloud_id) == "running"
    instance.refresh_from_db()
    assert (instance.cloud_id, instance.status) == (only.cloud_id, S.RUNNING)


def test_a_host_a_worker_records_during_the_pass_is_the_one_kept(
    place_order, alice, settings, monkeypatch
):
    """Reconcile listed two hosts of a row with none recorded; just before it adopts the
    earlier, a worker records the later one. The row keeps the worker's host, and the earlier
    one is the double."""
    instance = place_order(alice).instances.get()
    services.instance_transition(instance=instance, to=S.PROVISIONING, reason="x", actor="t")
    earlier = second_host(instance, settings, seconds_ago=20)
    workers = second_host(instance, settings, seconds_ago=10)
    real_record = services.cloud.instance_record_host

    def worker_records_first(row, host):
        Instance.objects.filter(pk=row.pk, cloud_id__isnull=True).update(cloud_id=workers.cloud_id)
        return real_record(row, host)

    monkeypatch.setattr(reconcile_module, "instance_record_host", worker_records_first)
    report = services.reconcile()

    assert report.adopted == []
    assert report.doubles_terminated == [earlier.cloud_id]
    assert cloud_state(workers.cloud_id) == "running"
    assert Instance.objects.get(pk=instance.pk).cloud_id == workers.cloud_id


def test_reconcile_never_ends_another_deployments_host_with_our_instance_tag(
    running_host, settings, monkeypatch
):
    """Even from a cloud whose listing ignored the deployment filter."""
    instance = running_host()
    theirs = launch_as("staging", settings, instance_uuid=str(instance.pk))
    real_find = SimulatedProvider.find_tagged

    def unfiltered(self, instance_uuid=None):
        ours = settings.PORTAL_DEPLOYMENT
        hosts = real_find(self, instance_uuid)
        settings.PORTAL_DEPLOYMENT = "staging"
        try:
            return hosts + real_find(self, instance_uuid)
        finally:
            settings.PORTAL_DEPLOYMENT = ours

    monkeypatch.setattr(SimulatedProvider, "find_tagged", unfiltered)
    report = services.reconcile()

    assert report.doubles_terminated == [] and report.orphans_terminated == []
    assert cloud_state(theirs.cloud_id) == "running"
    assert cloud_state(instance.cloud_id) == "running"


def test_a_throttled_terminate_of_a_duplicate_is_tried_again_at_the_next_pass(
    running_host, settings, monkeypatch
):
    instance = running_host()
    double = second_host(instance, settings)
    real_terminate = SimulatedProvider.terminate

    def throttled(self, cloud_id):
        raise ProviderTransientError("Request limit exceeded.", code="RequestLimitExceeded")

    monkeypatch.setattr(SimulatedProvider, "terminate", throttled)
    report = services.reconcile()
    assert report.deferred == [double.cloud_id] and report.doubles_terminated == []
    assert cloud_state(double.cloud_id) == "running"
    assert not instance.events.filter(reason__startswith="terminated duplicate").exists()
    # The beat task asks for a sooner pass than beat's next.
    with pytest.raises(Retry) as retry:
        tasks.reconcile.apply(throw=True)
    assert isinstance(retry.value.exc, ProviderTransientError)

    monkeypatch.setattr(SimulatedProvider, "terminate", real_terminate)
    report = services.reconcile()
    assert report.doubles_terminated == [double.cloud_id] and report.deferred == []
    assert cloud_state(double.cloud_id) == "terminated"


@pytest.mark.parametrize("check", ["answered", "throttled"])
def test_a_terminate_whose_reply_is_lost_still_ends_the_duplicate_once(
    running_host, settings, monkeypatch, check
):
    """The terminate took effect and its reply was lost; the host, shutting down, will not be
    listed again, so this pass is the one to record it, whether or not the cloud answers the
    check that follows."""
    instance = running_host()
    double = second_host(instance, settings)
    settings.PORTAL_SIMULATED_LOST_REPLY_RATE = 1.0
    if check == "throttled":
        real_describe = SimulatedProvider.describe

        def describe(self, cloud_ids):
            if double.cloud_id in cloud_ids and cloud_state(double.cloud_id) != "running":
                raise ProviderTransientError("Request limit exceeded.", code="RequestLimitExceeded")
            return real_describe(self, cloud_ids)

        monkeypatch.setattr(SimulatedProvider, "describe", describe)

    report = services.reconcile()

    assert report.doubles_terminated == [double.cloud_id] and report.deferred == []
    assert cloud_state(double.cloud_id) == "terminated"
    assert instance.events.filter(reason__startswith="terminated duplicate").count() == 1
