"""My hosts at scale: hosts grouped by order with a running total, the order just placed
highlighted, bulk stop and terminate through the one action service, and a host's name."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from instances import services
from instances.models import Instance

pytestmark = pytest.mark.django_db


def provisioned(order) -> list[Instance]:
    return [services.instance_provision(instance_id=i.pk) for i in order.instances.order_by("id")]


@pytest.fixture
def hosts(clock, alice, place_order):
    """alice's three running on-demand g5.xlarge ($1.006/h each) from two orders."""
    first = provisioned(place_order(alice))
    clock.shift(timedelta(seconds=1))  # the second order is the newer one
    return first + provisioned(place_order(alice, count=2))


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def said(response) -> list[str]:
    return [message.message for message in get_messages(response.wsgi_request)]


def bulk(client, action, *hosts, **extra):
    body = {"action": action, "host": [str(getattr(h, "pk", h)) for h in hosts], **extra}
    return client.post("/hosts/bulk/", body)


def test_a_host_is_named_as_the_cloud_tags_it(hosts):
    host = hosts[0]
    assert host.name == f"portal-{str(host.pk)[:8]}"


def test_my_hosts_groups_hosts_by_order_with_a_running_total(hosts, alice):
    response = signed_in(alice).get("/hosts/")
    assert response.status_code == 200
    groups = response.context["groups"]
    assert [len(group["hosts"]) for group in groups] == [2, 1]  # the newest order first
    assert [str(group["rate"]) for group in groups] == ["2.012000", "1.006000"]
    html = response.content.decode()
    assert "3 hosts</strong> · 3 running at <strong>$3.02/h" in html
    assert html.count('class="card order-group"') == 2


def test_the_order_just_placed_is_highlighted_not_filtered_to(hosts, alice):
    new = hosts[1].order
    response = signed_in(alice).get(f"/hosts/?new={new.pk}")
    assert [group["new"] for group in response.context["groups"]] == [True, False]
    assert len(response.context["hosts"]) == 3
    assert response.content.decode().count("order-group is-new") == 1
    # A malformed id highlights nothing and hides nothing.
    response = signed_in(alice).get("/hosts/?new=not-an-id")
    assert response.status_code == 200 and len(response.context["hosts"]) == 3


def test_bulk_terminate_asks_each_host_through_the_action_service(hosts, alice):
    pair = hosts[1:]
    response = bulk(signed_in(alice), "terminate", *pair, next="/hosts/?scope=mine")
    assert response.status_code == 302 and response["Location"] == "/hosts/?scope=mine"
    names = ", ".join(sorted(host.name for host in pair))
    assert said(response) == [f"Terminate requested for 2 hosts: {names}."]
    for host in pair:
        host.refresh_from_db()
        assert host.status == "terminating"
        assert host.events.filter(new_status="terminating", actor="user:alice").count() == 1
    hosts[0].refresh_from_db()
    assert hosts[0].status == "running"


def test_a_managers_bulk_action_reads_their_projects_once_not_per_host(hosts, bob, projects):
    """bob manages vision-lab: he may end alice's hosts, and who he manages is read once for the
    batch (the per-host request used to read it again for every host)."""
    from unittest import mock

    from portal import permissions
    from portal.models import Membership
    from portal.services import membership_set

    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    with mock.patch.object(
        permissions, "managed_project_ids", wraps=permissions.managed_project_ids
    ) as managed:
        response = bulk(signed_in(bob), "terminate", *hosts)
    assert response.status_code == 302
    assert said(response)[0].startswith("Terminate requested for 3 hosts")
    assert managed.call_count == 1
    assert {h.status for h in Instance.objects.filter(pk__in=[h.pk for h in hosts])} == {
        "terminating"
    }


def test_bulk_stop_goes_ahead_where_it_can_and_names_the_refusals(hosts, alice, place_order):
    spot = provisioned(place_order(alice, market="spot"))[0]
    response = bulk(signed_in(alice), "stop", hosts[0], spot)
    assert response.status_code == 302
    messages = said(response)
    assert messages[0] == f"Stop requested for 1 host: {hosts[0].name}."
    assert messages[1].startswith(f"{spot.name} (g5.xlarge): Spot hosts cannot be stopped")
    assert Instance.objects.get(pk=hosts[0].pk).status == "stopping"
    assert Instance.objects.get(pk=spot.pk).status == "running"


def test_one_host_that_is_not_yours_refuses_the_whole_batch(hosts, alice, bob, place_order):
    bobs = provisioned(place_order(bob))[0]
    response = bulk(signed_in(bob), "terminate", bobs, hosts[0])
    assert response.status_code == 403
    assert not Instance.objects.filter(status="terminating").exists()


def test_a_stranger_hears_of_no_host(hosts, carol):
    response = bulk(signed_in(carol), "terminate", hosts[0])
    assert response.status_code == 404
    assert not Instance.objects.filter(status="terminating").exists()


@pytest.mark.parametrize(
    ("action", "ticked", "status", "message"),
    [
        ("terminate", [], 302, "Tick the hosts to terminate first."),
        ("stop", ["not-a-host"], 302, "Those are not hosts of this portal"),
        ("explode", None, 404, None),
        ("stop", [str(uuid.uuid4())], 404, None),
    ],
)
def test_bad_bulk_requests_are_answered_in_words(hosts, alice, action, ticked, status, message):
    ticked = [str(hosts[0].pk)] if ticked is None else ticked
    response = signed_in(alice).post("/hosts/bulk/", {"action": action, "host": ticked})
    assert response.status_code == status
    if message:
        assert said(response)[0].startswith(message)
    assert not Instance.objects.exclude(status="running").exists()


def test_an_ended_host_does_not_promise_an_ssh_command(hosts, alice):
    host = hosts[0]
    services.instance_request_terminate(instance=host, user=alice)
    html = signed_in(alice).get(f"/hosts/{host.pk}/").content.decode()
    assert f"<title>{host.name} · g5.xlarge · GPU Portal</title>" in html
    assert "appears here once the host is running" not in html
    assert "nothing to connect to any more" in html


# --- the same through the API: POST /api/v1/instances/bulk/ -----------------------------------


def api_bulk(client, action, *hosts):
    body = {"action": action, "instances": [str(getattr(h, "pk", h)) for h in hosts]}
    return client.post("/api/v1/instances/bulk/", body, content_type="application/json")


def test_the_api_stops_many_hosts_and_lists_the_ones_whose_state_refuses(hosts, alice, place_order):
    spot = provisioned(place_order(alice, market="spot"))[0]
    response = api_bulk(signed_in(alice), "stop", hosts[0], hosts[1], spot)
    assert response.status_code == 202
    body = response.json()
    assert body["action"] == "stop"
    requested = sorted([hosts[0], hosts[1]], key=lambda host: host.name)
    assert [h["id"] for h in body["requested"]] == [str(h.pk) for h in requested]
    assert {h["status"] for h in body["requested"]} == {"stopping"}
    (refused,) = body["refused"]
    assert refused["instance"] == str(spot.pk) and refused["name"] == spot.name
    assert refused["code"] == "spot_cannot_stop"
    assert refused["detail"].startswith("Spot hosts cannot be stopped")
    assert Instance.objects.get(pk=spot.pk).status == "running"
    # Asked again (a retried request): the stop already asked stands, nothing moves twice.
    again = api_bulk(signed_in(alice), "stop", hosts[0]).json()
    assert [h["status"] for h in again["requested"]] == ["stopping"] and again["refused"] == []
    assert Instance.objects.get(pk=hosts[0].pk).events.filter(new_status="stopping").count() == 1


def test_the_api_refuses_a_batch_with_a_host_that_is_not_yours_or_not_seen(
    hosts, alice, bob, carol, place_order
):
    bobs = provisioned(place_order(bob))[0]
    response = api_bulk(signed_in(bob), "terminate", bobs, hosts[0])
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    response = api_bulk(signed_in(carol), "terminate", hosts[0])
    assert response.status_code == 404
    assert not Instance.objects.filter(status="terminating").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "explode", "instances": ["H"]}, "action"),
        ({"action": "stop", "instances": []}, "instances"),
        ({"action": "stop", "instances": ["not-a-host"]}, "instances"),
        ({"action": "stop", "instances": [str(uuid.uuid4())] * 101}, "instances"),
        ({"action": "stop"}, "instances"),
        ({"action": "stop", "instances": "H", "force": True}, "force"),
    ],
)
def test_bad_bulk_bodies_answer_400_naming_the_field(hosts, alice, body, field):
    body = {
        key: (
            [str(hosts[0].pk) if v == "H" else v for v in value]
            if isinstance(value, list)
            else (str(hosts[0].pk) if value == "H" else value)
        )
        for key, value in body.items()
    }
    response = signed_in(alice).post(
        "/api/v1/instances/bulk/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert any(name.split(".")[0] == field for name in response.json()["fields"])
    assert not Instance.objects.exclude(status="running").exists()
