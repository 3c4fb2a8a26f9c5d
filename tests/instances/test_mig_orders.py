"""Orders of MIG slices on the simulated cloud: a slice is a host record placed on a shared host of
its type and profile (launched when none has room), running at the host's address with its own
MIG device; quotas count it in GPU-equivalents, metering bills it at its profile's share and
never bills the shared host; it is given back (not stopped), and a shared host with no slice
left ends after PORTAL_MIG_HOST_EMPTY_MINUTES; what an order of slices refuses."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from billing.models import Usage
from billing.services.metering import usage_meter
from billing.services.rollups import rollups_refresh
from instances import services, tasks
from instances.models import Instance, MigSlot, Order, Quota
from instances.providers.simulated import SimulatedProvider
from instances.services.mig import mig_host_follow, mig_slice_place
from portal.models import Notice

S = Instance.Status


@pytest.fixture(autouse=True)
def _slices_taken(settings):
    settings.PORTAL_SIMULATED_AGENTS = True


@pytest.fixture
def slice_body(order_body):
    def body(**overrides):
        return order_body(instance_type="p4d.24xlarge", mig_profile="1g.5gb") | overrides

    return body


@pytest.fixture
def slices(place_order, alice, catalog):
    """Place an order of ``count`` slices through the service and launch each of them."""

    def make(count: int = 1, *, user=None, profile: str = "1g.5gb", **overrides) -> list:
        order = place_order(
            user or alice,
            instance_type=catalog["p4d.24xlarge"],
            mig_profile=profile,
            count=count,
            **overrides,
        )
        for record in order.instances.all():
            tasks.provision_instance.apply(args=[str(record.pk)])
        return list(order.instances.order_by("created_at", "id"))

    return make


def shared_hosts():
    return Instance.objects.filter(order__mig_host=True)


def host_run(host: Instance) -> Instance:
    """The shared host's own launch, then its slices follow it (its move's task)."""
    tasks.provision_instance.apply(args=[str(host.pk)])
    mig_host_follow(host_id=host.pk)
    return Instance.objects.get(pk=host.pk)


def test_a_slice_order_places_slices_on_one_shared_host_that_it_launches(api_as, alice, slice_body):
    reply = api_as(alice).post("/api/v1/orders/", slice_body(count=2), format="json")
    assert reply.status_code == 201, reply.json()
    order = reply.json()
    assert order["mig_profile"] == "1g.5gb" and order["count"] == 2
    # 1/7 of one of eight A100s at $32.7726/h, the share as the catalog lists it.
    assert order["quoted_price_per_hour"] == "0.585401"
    assert order["estimate"]["per_hour"] == "1.170802"
    records = Instance.objects.filter(order_id=order["id"]).order_by("created_at", "id")
    for record in records:
        tasks.provision_instance.apply(args=[str(record.pk)])
    host = shared_hosts().get()
    assert host.order.mig_profile.name == "1g.5gb" and host.instance_type.name == "p4d.24xlarge"
    assert MigSlot.objects.filter(host=host).count() == 56
    assert [r.status for r in records.all()] == [S.PROVISIONING] * 2  # waiting for the host
    host = host_run(host)
    assert host.status == S.RUNNING
    shown = api_as(alice).get(f"/api/v1/orders/{order['id']}/").json()["instances"]
    assert {h["status"] for h in shown} == {"running"}
    assert {h["public_ip"] for h in shown} == {host.public_ip}
    assert {h["shared_host"] for h in shown} == {str(host.pk)}
    devices = [h["mig_device"] for h in shown]
    assert len(set(devices)) == 2 and all(d.startswith("MIG-") for d in devices)
    assert all(h["mig_profile"] == "1g.5gb" for h in shown)
    # Each slice has a login of its own on its host, its owner's key forced into the slice's
    # sandbox (tests/instances/test_mig_logins.py logs in); the shared host has none.
    logins = {h["ssh_command"] for h in shown}
    assert len(logins) == 2 and all(login.startswith("ssh -p ") for login in logins)
    assert api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()["ssh_command"] is None
    # A third slice ordered later lands on the same host: no second shared host.
    reply = api_as(alice).post("/api/v1/orders/", slice_body(), format="json")
    third = Instance.objects.get(order_id=reply.json()["id"])
    tasks.provision_instance.apply(args=[str(third.pk)])
    third.refresh_from_db()
    assert third.status == S.RUNNING and third.held_slot.host_id == host.pk
    assert shared_hosts().count() == 1


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"mig_profile": "9g.99gb"}, "mig_profile", "has no MIG profile '9g.99gb'; it splits into"),
        (
            {"instance_type": "g5.xlarge"},
            "mig_profile",
            "does not split into MIG slices",
        ),
        (
            {"placement": "cluster", "nodes": 2, "count": None},
            "mig_profile",
            "A cluster's nodes are whole hosts",
        ),
        (
            {"market": "spot", "interruption_policy": "relaunch_spot"},
            "interruption_policy",
            "its interruption_policy is notify",
        ),
    ],
)
def test_what_an_order_of_slices_refuses(api_as, alice, slice_body, overrides, field, words):
    body = {k: v for k, v in (slice_body() | overrides).items() if v is not None}
    reply = api_as(alice).post("/api/v1/orders/", body, format="json")
    assert reply.status_code == 400, reply.json()
    assert words in str(reply.json()), reply.json()
    assert field in str(reply.json())
    assert not Order.objects.exists()
    estimate = api_as(alice).get(
        "/api/v1/orders/estimate/",
        {"instance_type": "g5.xlarge", "mig_profile": "1g.5gb", "market": "on_demand"},
    )
    assert estimate.status_code == 400 and "does not split" in str(estimate.json())


def test_quotas_count_slices_in_gpu_equivalents_and_not_the_shared_host(
    api_as, alice, slices, slice_body, projects
):
    Quota.objects.create(project=projects["vision-lab"], max_gpus=1)
    slices(6)
    usage = api_as(alice).get("/api/v1/quotas/").json()["results"][0]["in_use"]
    assert usage["gpus"] == round(6 / 7, 4) and usage["gpus_by_model"] == {"A100": 0.8571}
    assert usage["instances"] == 6  # the six slices; their shared host is not the project's
    assert len(slices(1)) == 1  # seven sevenths: exactly one GPU
    reply = api_as(alice).post("/api/v1/orders/", slice_body(), format="json")
    assert reply.status_code == 409
    assert "1 are in use and this order asks for 1/7" in reply.json()["detail"]
    # A 3g slice asks 3/7 of a GPU.
    Quota.objects.filter(project=projects["vision-lab"]).update(max_gpus=2)
    reply = api_as(alice).post(
        "/api/v1/orders/", slice_body(mig_profile="3g.20gb", count=3), format="json"
    )
    assert reply.status_code == 409
    assert "asks for 1 2/7" in reply.json()["detail"]


def test_a_slice_is_billed_at_its_share_and_its_shared_host_not_at_all(
    api_as, alice, clock, slices
):
    records = slices(2)
    host = host_run(shared_hosts().get())
    clock.shift(timedelta(hours=1))
    usage_meter()
    rows = Usage.objects.filter(instance__in=records)
    assert {row.rate_micros for row in rows} == {585_401}
    assert {row.mig_profile for row in rows} == {"1g.5gb"}
    # One hour of 1/7 of a GPU: 514 GPU-seconds each, to the whole second.
    assert sum(row.gpu_seconds for row in rows) == 2 * (3600 // 7)
    assert not Usage.objects.filter(instance=host).exists()
    rollups_refresh()
    today = timezone.now().date()
    body = (
        api_as(alice)
        .get(
            "/api/v1/costs/",
            {"start": str(today - timedelta(days=1)), "end": str(today), "group_by": "mig_profile"},
        )
        .json()
    )
    assert [(g["key"], g["label"], g["cost"]) for g in body["groups"]] == [
        ("1g.5gb", "1g.5gb slices", "1.17")
    ]


def test_a_slice_is_given_back_not_stopped_and_an_empty_shared_host_ends(
    api_as, alice, clock, slices, settings
):
    records = slices(2)
    host = host_run(shared_hosts().get())
    one = Instance.objects.with_detail().get(pk=records[0].pk)
    assert [action.name for action in one.actions_now] == ["terminate"]
    assert Instance.objects.with_detail().get(pk=host.pk).actions_now == []
    assert api_as(alice).post(f"/api/v1/instances/{one.pk}/stop/").status_code == 409
    for record in records:
        assert api_as(alice).post(f"/api/v1/instances/{record.pk}/terminate/").status_code == 202
        tasks.terminate_instance.apply(args=[str(record.pk)])
    assert {r.status for r in Instance.objects.filter(pk__in=[r.pk for r in records])} == {
        S.TERMINATED
    }
    assert not MigSlot.objects.filter(holder__isnull=False).exists()
    assert Instance.objects.get(pk=host.pk).status == S.RUNNING
    clock.shift(timedelta(minutes=settings.PORTAL_MIG_HOST_EMPTY_MINUTES - 1))
    services.reconcile()
    assert Instance.objects.get(pk=host.pk).status == S.RUNNING
    clock.shift(timedelta(minutes=2))
    services.reconcile()
    assert Instance.objects.get(pk=host.pk).status == S.TERMINATING


def test_an_empty_shared_host_is_laid_out_again_for_another_profile_not_launched_anew(
    slices, api_as, alice
):
    first = slices(profile="3g.20gb")[0]
    host = host_run(shared_hosts().get())
    assert MigSlot.objects.filter(host=host).count() == 16  # two 3g.20gb per A100
    # A busy host keeps its layout: a 1g.5gb slice then gets a host of its own.
    other = slices(profile="1g.5gb")[0]
    assert shared_hosts().count() == 2
    assert Instance.objects.get(pk=other.pk).held_slot.host_id != host.pk
    # Once no slice holds any of it, the 3g host is laid out again for the next 1g order
    # instead of a third host being launched (and the idle one ending half an hour later).
    for record in (first, other):
        assert api_as(alice).post(f"/api/v1/instances/{record.pk}/terminate/").status_code == 202
        tasks.terminate_instance.apply(args=[str(record.pk)])
    again = slices(profile="2g.10gb")[0]
    assert shared_hosts().count() == 2
    slot = Instance.objects.get(pk=again.pk).held_slot
    assert slot.host_id == host.pk and slot.profile.name == "2g.10gb"
    assert MigSlot.objects.filter(host=host).count() == 24  # three 2g.10gb per A100
    assert set(MigSlot.objects.filter(host=host).values_list("profile__name", flat=True)) == {
        "2g.10gb"
    }
    assert Instance.objects.get(pk=again.pk).status == S.RUNNING  # the host already runs
    shown = api_as(alice).get(f"/api/v1/instances/{host.pk}/").json()
    assert shown["mig_profile"] == "2g.10gb"
    assert host.events.filter(reason__startswith="laid out again for 2g.10gb").exists()


def test_slices_end_with_their_shared_host_and_fail_with_one_that_never_ran(slices):
    records = slices(2)
    host = shared_hosts().get()
    services.instance_fail(instance_id=host.pk, reason="no capacity")
    mig_host_follow(host_id=host.pk)
    failed = Instance.objects.filter(pk__in=[r.pk for r in records])
    assert {r.status for r in failed} == {S.FAILED}
    assert all("its shared host" in r.status_reason for r in failed)
    assert not MigSlot.objects.filter(holder__isnull=False).exists()
    # The next slice launches a new shared host.
    again = slices(1)[0]
    assert again.held_slot.host_id != host.pk
    newer = host_run(Instance.objects.get(pk=again.held_slot.host_id))
    services.instances_end([newer], reason="test", actor="system:test")
    tasks.terminate_instance.apply(args=[str(newer.pk)])
    mig_host_follow(host_id=newer.pk)
    again.refresh_from_db()
    assert again.status == S.TERMINATED and "its shared host" in again.status_reason


def test_a_cloud_without_slice_sessions_takes_no_slices(api_as, alice, slice_body, settings):
    settings.PORTAL_SIMULATED_AGENTS = False  # no process of a host runs on this machine
    reply = api_as(alice).post("/api/v1/orders/", slice_body(), format="json")
    assert reply.status_code == 400
    assert "offers no slice sessions" in str(reply.json()["fields"]["mig_profile"])
    assert not Order.objects.exists()


def test_host_pages_show_a_slices_place_and_admins_the_shared_hosts_layout(
    client, alice, bob, ada, slices
):
    mine = slices(1)[0]
    theirs = slices(1, user=bob)[0]
    host = host_run(shared_hosts().get())
    mine.refresh_from_db()
    client.force_login(alice)
    page = client.get(f"/hosts/{mine.pk}/").content.decode()
    assert "MIG slice 1g.5gb" in page and mine.held_slot.device_uuid in page
    shared = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "2 of 56 1g.5gb slices in use" in shared
    assert 'data-testid="mig-layout"' not in shared  # who holds what is for admins
    client.force_login(ada)
    shared = client.get(f"/hosts/{host.pk}/").content.decode()
    assert 'data-slot="0/0"' in shared and 'data-slot="7/6"' in shared
    assert f'href="/hosts/{mine.pk}/">alice</a>' in shared
    assert f'href="/hosts/{theirs.pk}/">bob</a>' in shared


def test_a_job_runs_on_one_on_demand_slice(api_as, alice):
    body = {
        "project": "vision-lab",
        "name": "small",
        "instance_type": "p4d.24xlarge",
        "image": "tf-2.17-cuda12.3",
        "market": "spot",
        "command": "python train.py",
        "mig_profile": "2g.10gb",
    }
    reply = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert reply.status_code == 400
    assert "runs on-demand" in str(reply.json()["fields"]["market"])
    reply = api_as(alice).post("/api/v1/jobs/", body | {"nodes": 2}, format="json")
    assert reply.status_code == 400 and "whole hosts" in str(reply.json())
    reply = api_as(alice).post("/api/v1/jobs/", body | {"market": "on_demand"}, format="json")
    assert reply.status_code == 201, reply.json()
    assert reply.json()["mig_profile"] == "2g.10gb"
    order = Order.objects.get(pk=reply.json()["order"])
    assert order.is_mig_slice and order.count == 1 and order.mig_profile.name == "2g.10gb"
    # 0.2857 of one of eight A100s at $32.7726/h.
    assert order.quoted_price_per_hour == Decimal("1.170391")


def test_a_spot_shared_hosts_warning_reaches_each_slices_owner_and_its_loss_ends_them(
    slices, alice, bob, clock, settings
):
    settings.PORTAL_SPOT_EVENTS_QUEUE_URL = ""
    settings.PORTAL_SPOT_WARNING_LEAD_SECONDS = 120
    mine = slices(1, market="spot")[0]
    theirs = slices(1, user=bob, market="spot")[0]
    host = host_run(shared_hosts().get())
    SimulatedProvider().warn(host.cloud_id)
    services.spot_events_drain()
    for user, record in ((alice, mine), (bob, theirs)):
        told = Notice.objects.filter(user=user, subject__contains="will be interrupted")
        assert told.count() == 1  # of their slice; nobody hears of the shared host itself
        assert told.get().link == f"/hosts/{record.pk}/"
        assert "shared host" in told.get().body
        record.refresh_from_db()
        assert record.spot_interruption_at is not None
    # A slice ordered now goes to another shared host, not the one being taken back.
    later = slices(1, market="spot")[0]
    assert later.held_slot.host_id != host.pk
    clock.shift(timedelta(seconds=121))
    services.reconcile()
    mig_host_follow(host_id=host.pk)
    for user, record in ((alice, mine), (bob, theirs)):
        record.refresh_from_db()
        assert record.status == S.TERMINATED
        assert Notice.objects.filter(
            user=user, subject__startswith="Spot host interrupted"
        ).exists()
    assert not MigSlot.objects.filter(host=host, holder__isnull=False).exists()


def test_a_slice_given_back_before_its_placement_takes_no_slot_and_launches_no_host(slices):
    record = slices(1)[0]
    host = shared_hosts().get()
    stale = Instance.objects.with_detail().get(pk=record.pk)
    Instance.objects.filter(pk=record.pk).update(status=S.REQUESTED)  # as before its launch
    services.instance_transition(
        instance=record, to=S.TERMINATING, reason="given back", actor="user:alice"
    )
    services.instance_transition(
        instance=record, to=S.TERMINATED, reason="given back", actor="system:terminate"
    )
    assert mig_slice_place(holder=stale, profile=stale.order.mig_profile) is None
    from instances.services.mig import mig_slice_provision

    mig_slice_provision(instance=stale)
    assert not MigSlot.objects.filter(holder__isnull=False).exists()
    assert shared_hosts().count() == 1 and shared_hosts().get() == host


@pytest.mark.django_db(transaction=True)
def test_an_empty_host_a_placement_holds_a_slot_of_is_left_for_the_next_pass(
    slices, clock, settings
):
    record = slices(1)[0]
    host = host_run(shared_hosts().get())
    services.instance_transition(
        instance=Instance.objects.get(pk=record.pk),
        to=S.TERMINATING,
        reason="given back",
        actor="user:alice",
    )
    tasks.terminate_instance.apply(args=[str(record.pk)])
    clock.shift(timedelta(minutes=settings.PORTAL_MIG_HOST_EMPTY_MINUTES + 1))
    held, release = threading.Event(), threading.Event()

    def placing():  # a placement in another transaction, between its lock and its commit
        with transaction.atomic():
            MigSlot.objects.select_for_update().filter(host=host).order_by("id").first()
            held.set()
            release.wait(10)
        connection.close()

    other = threading.Thread(target=placing)
    other.start()
    held.wait(10)
    try:
        assert services.mig_hosts_end_empty() == []
    finally:
        release.set()
        other.join()
    assert Instance.objects.get(pk=host.pk).status == S.RUNNING
    assert services.mig_hosts_end_empty() == [str(host.pk)]


def test_a_shared_host_the_cloud_stops_takes_its_slices_and_ends(slices):
    records = slices(2)
    host = host_run(shared_hosts().get())
    SimulatedProvider().stop(host.cloud_id)
    services.reconcile()
    mig_host_follow(host_id=host.pk)
    for record in records:
        record.refresh_from_db()
        assert record.status == S.TERMINATED and "is stopped" in record.status_reason
    services.reconcile()
    assert Instance.objects.get(pk=host.pk).status == S.TERMINATING


def test_a_slices_lease_extension_is_priced_at_its_share(slices, projects, clock):
    from billing.models import Budget

    record = slices(1)[0]
    host_run(shared_hosts().get())
    Budget.objects.create(
        project=projects["vision-lab"],
        monthly_amount=Decimal("20"),
        policy=Budget.Policy.BLOCK_ALL,
    )
    record = Instance.objects.with_detail().get(pk=record.pk)
    extended = services.instance_extend_lease(instance=record, user=record.owner, hours=1)
    assert extended.lease_extended_hours == 1  # $0.59, not a whole p4d's $32.77


def test_a_shared_host_opens_no_notebook_and_a_slice_order_takes_no_max_spot_price(
    slices, alice, api_as, slice_body
):
    slices(1)
    host = Instance.objects.with_detail().get(pk=host_run(shared_hosts().get()).pk)
    refused = services.notebook_refusal(host)
    assert refused is not None and refused[0] == "mig_shared_host"
    reply = api_as(alice).post(
        "/api/v1/orders/",
        slice_body(market="spot", max_spot_price="0.50"),
        format="json",
    )
    assert reply.status_code == 400
    assert "takes no max_spot_price" in str(reply.json()["fields"]["max_spot_price"])


def test_the_bill_of_a_shared_host_is_compared_with_its_slices_usage(clock, slices):
    from billing.services.cur import Line, Report, compare

    records = slices(2)
    host = host_run(shared_hosts().get())
    start = timezone.now()
    clock.shift(timedelta(hours=1))
    usage_meter()
    # The cloud bills the whole host for the hour; the portal metered two 1/7 slices of it.
    line = Line(
        resource_id=host.cloud_id,
        tag_instance=str(host.pk),
        cost=Decimal("1.170802"),
        start=start,
        end=timezone.now(),
        is_instance_usage=True,
    )
    result = compare(Report(lines=[line], lines_read=1))
    assert [(row.instance_id, row.status) for row in result.rows] == [(host.pk, "matched")]
    assert all(r.pk not in {row.instance_id for row in result.rows} for r in records)
