"""GET /api/v1/instances/ and the stop, start and terminate actions, by owner and others."""

from __future__ import annotations

import pytest

from instances.models import Instance
from instances.services import instance_cloud_action

URL = "/api/v1/instances/"


def act(client, instance, verb):
    return client.post(f"{URL}{instance.pk}/{verb}/")


def test_owner_sees_her_running_host_with_an_ssh_command(clock, api_as, alice, running_host):
    host = running_host()
    body = api_as(alice).get(f"{URL}{host.pk}/").json()
    assert body["status"] == "running"
    assert body["ssh_command"] == f"ssh ubuntu@{host.public_ip}"
    assert body["cloud_id"] == host.cloud_id
    assert [e["new_status"] for e in body["events"]] == ["requested", "provisioning", "running"]
    assert body["cost_so_far"] == "0.016767"  # the 60-second minimum at $1.006/h


def test_owner_stops_starts_and_terminates_her_host(api_as, alice, running_host):
    host = running_host()
    client = api_as(alice)
    response = act(client, host, "stop")
    assert response.status_code == 202 and response.json()["status"] == "stopping"
    assert instance_cloud_action(instance_id=host.pk, action="stop").status == "stopped"
    assert act(client, host, "start").json()["status"] == "starting"
    assert instance_cloud_action(instance_id=host.pk, action="start").status == "running"
    assert act(client, host, "terminate").json()["status"] == "terminating"
    assert instance_cloud_action(instance_id=host.pk, action="terminate").status == "terminated"
    statuses = list(host.events.values_list("new_status", flat=True))
    assert statuses == [
        "requested",
        "provisioning",
        "running",
        "stopping",
        "stopped",
        "starting",
        "running",
        "terminating",
        "terminated",
    ]


@pytest.mark.parametrize("verb", ["stop", "start", "terminate"])
def test_a_stranger_gets_404_for_every_action(api_as, carol, running_host, verb):
    host = running_host()
    response = act(api_as(carol), host, verb)
    assert response.status_code == 404
    assert api_as(carol).get(f"{URL}{host.pk}/").status_code == 404
    host.refresh_from_db()
    assert host.status == "running"


@pytest.mark.parametrize("verb", ["stop", "terminate"])
def test_a_project_mate_sees_the_host_but_cannot_act_on_it(api_as, bob, running_host, verb):
    host = running_host()
    assert api_as(bob).get(f"{URL}{host.pk}/").status_code == 200
    response = act(api_as(bob), host, verb)
    assert response.status_code == 403
    assert Instance.objects.get(pk=host.pk).status == "running"


def test_finance_reads_hosts_but_cannot_act(api_as, fin, running_host):
    host = running_host()
    assert api_as(fin).get(f"{URL}{host.pk}/").status_code == 200
    assert act(api_as(fin), host, "terminate").status_code == 403


def test_admin_acts_on_any_host(api_as, ada, running_host):
    host = running_host()
    assert act(api_as(ada), host, "terminate").status_code == 202


def test_acting_in_the_wrong_state_is_a_409_that_says_why(api_as, alice, running_host):
    host = running_host()
    response = act(api_as(alice), host, "start")
    assert response.status_code == 409
    assert response.json() == {
        "code": "invalid_state",
        "detail": "This host is running; only stopped hosts can be started.",
    }


def test_a_spot_host_cannot_be_stopped(api_as, alice, running_host):
    host = running_host(market="spot")
    response = act(api_as(alice), host, "stop")
    assert response.status_code == 409
    assert response.json()["code"] == "spot_cannot_stop"


def test_terminate_twice_is_harmless(api_as, alice, running_host):
    host = running_host()
    assert act(api_as(alice), host, "terminate").status_code == 202
    assert act(api_as(alice), host, "terminate").status_code == 202
    assert host.events.filter(new_status="terminating").count() == 1


def test_list_filters_by_status_project_type_and_market(
    api_as, alice, carol, running_host, place_order, projects, catalog
):
    running_host()
    running_host(market="spot", instance_type=catalog["g6.xlarge"])
    place_order(alice)  # stays requested: no worker ran
    place_order(carol, project=projects["nlp-lab"])
    client = api_as(alice)

    def count(query):
        response = client.get(f"{URL}?{query}")
        assert response.status_code == 200, response.json()
        return response.json()["count"]

    assert count("") == 3  # carol's host is in another project
    assert count("status=running") == 2
    assert count("status=running&status=requested") == 3
    assert count("market=spot") == 1
    assert count("instance_type=g6.xlarge") == 1
    assert count("project=vision-lab") == 3
    assert count("project=nlp-lab") == 0
    assert count("page_size=2") == 3
    assert len(client.get(f"{URL}?page_size=2").json()["results"]) == 2
    assert client.get(f"{URL}?status=exploded").status_code == 400
    assert api_as(carol).get(URL).json()["count"] == 1


def test_a_project_manager_acts_on_every_host_of_the_project(api_as, bob, running_host, projects):
    from portal.models import Membership
    from portal.services import membership_set

    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    host = running_host()
    assert act(api_as(bob), host, "terminate").status_code == 202
