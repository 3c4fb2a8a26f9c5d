"""Safety nets around orders and hosts: what stops a double click, a second approver, a
neighbouring deployment, a refusing cloud or a lost task from doing harm.

1. An order already decided cannot be decided again: 409 ``already_decided``, nothing changes.
2. The order page carries a one-time ``submission`` key: posting the same form twice (a double
   click, a resubmitted page) places one order.
3. Every cloud host is tagged with its deployment; reconcile neither adopts nor ends another
   deployment's hosts (staging and production may share a cloud account).
4. A stop or start the cloud refuses for good puts the host back where it is, and says why.
5. Reconcile sends lost work again a bounded number of times, then fails the launch with a reason.
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import timedelta

import pytest
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
)
from instances.providers.simulated import SimulatedProvider
from portal.errors import Conflict
from portal.models import Membership, Notice
from portal.services import approval_policy_set, membership_set
from tests.conftest import ED25519

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
    assert first["Location"] == second["Location"] == f"/hosts/?order={order.pk}"


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
    monkeypatch.setattr(services, "enqueue", lambda task, *args: sent.append((task, *args)))
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

    assert sent == [(tasks.provision_instance, str(instance.pk))] * 3
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
    monkeypatch.setattr(services, "enqueue", lambda task, *args: sent.append((task, *args)))
    services.instance_request_stop(instance=instance, user=alice)  # and the stop task is lost
    for _ in range(2):
        time_passes(instance, 61)
        assert services.reconcile().enqueued == [str(instance.pk)]
    for _ in range(3):
        time_passes(instance, 61)
        assert services.reconcile().enqueued == []

    # The stop and its two re-sends; then the host stays stopping, for a person to look at.
    assert sent == [(tasks.stop_instance, str(instance.pk))] * 3
    instance.refresh_from_db()
    assert instance.status == S.STOPPING
    gave_up = instance.events.filter(reason__contains="giving up")
    assert [event.reason for event in gave_up] == [
        "re-enqueued 2 times, giving up: no worker carried out the stop"
    ]
    subject = f"No worker carried out the stop of host {str(instance.pk)[:8]}"
    told = Notice.objects.filter(subject=subject).values_list("user__username", flat=True)
    assert sorted(told) == ["ada", "alice"]
