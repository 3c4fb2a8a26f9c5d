"""Clusters on the simulated cloud: an order of N nodes launched together, all or none, each with
its rank and TF_CONFIG; what a cluster order refuses; admission for the whole cluster."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from instances import services, tasks
from instances.models import ApprovalPolicy, Instance, Order, SimulatedHost
from instances.providers.base import TAG_CLUSTER, TAG_INSTANCE, ProviderTransientError
from instances.providers.simulated import SimulatedProvider
from instances.selectors.clusters import (
    cluster_members,
    cluster_tf_config,
    network_environment,
)
from portal.models import Notice
from portal.services import project_isolation_set

S = Instance.Status


@pytest.fixture
def cluster_body(order_body):
    def body(**overrides):
        data = order_body(instance_type="p4d.24xlarge", placement="cluster", nodes=2, count=None)
        data.update(overrides)
        return {key: value for key, value in data.items() if value is not None}

    return body


@pytest.fixture
def cluster(place_order, alice, catalog):
    def make(nodes: int = 2, **overrides) -> Order:
        fields = {
            "instance_type": catalog["p4d.24xlarge"],
            "placement": "cluster",
            "count": nodes,
        }
        return place_order(alice, **fields | overrides)

    return make


def provision_all(order: Order) -> list[Instance]:
    for node in order.instances.all():
        tasks.provision_instance.apply(args=[str(node.pk)])
    return list(order.instances.order_by("rank"))


def test_a_cluster_order_places_its_nodes_with_ranks_and_answers_them(api_as, alice, cluster_body):
    reply = api_as(alice).post("/api/v1/orders/", cluster_body(nodes=3), format="json")
    assert reply.status_code == 201, reply.json()
    body = reply.json()
    assert body["placement"] == "cluster" and body["nodes"] == 3 and body["count"] == 3
    assert body["efa"] is True  # p4d.24xlarge has EFA, and the order did not say otherwise
    assert sorted(host["rank"] for host in body["instances"]) == [0, 1, 2]
    assert all(host["tf_config"] is None for host in body["instances"])  # nothing runs yet


def test_a_cluster_launches_all_its_nodes_in_one_zone_and_placement_group(cluster):
    order = cluster(nodes=3)
    first = order.instances.get(rank=0)
    # One node's task launches the whole cluster; the others find their hosts launched.
    tasks.provision_instance.apply(args=[str(first.pk)])
    assert SimulatedHost.objects.count() == 3
    nodes = provision_all(order)
    assert [node.status for node in nodes] == [S.RUNNING] * 3
    assert SimulatedHost.objects.count() == 3
    hosts = SimulatedHost.objects.all()
    assert {host.tags[TAG_CLUSTER] for host in hosts} == {str(order.pk)}
    assert len({host.availability_zone for host in hosts}) == 1
    assert {node.isolation["placement_group"] for node in nodes} == {f"portal-cluster-{order.pk}"}


def test_every_node_gets_the_same_worker_list_and_its_own_index(api_as, alice, cluster):
    order = cluster(nodes=2)
    nodes = provision_all(order)
    configs = [api_as(alice).get(f"/api/v1/instances/{n.pk}/").json()["tf_config"] for n in nodes]
    workers = configs[0]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert all(config["cluster"]["worker"] == workers for config in configs)
    assert [config["task"] for config in configs] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    # The simulated cloud's nodes run on this machine: their workers listen on loopback.
    assert all(worker.startswith("127.0.0.1:") for worker in workers)
    listed = api_as(alice).get("/api/v1/instances/").json()["results"]
    assert {host["rank"]: host["tf_config"] for host in listed} == {0: configs[0], 1: configs[1]}


def test_a_cluster_the_cloud_has_no_room_for_launches_no_node(cluster, settings):
    settings.PORTAL_PROVISION_MAX_RETRIES = 1
    order = cluster(nodes=4)
    # The simulated cloud runs six p4d.24xlarge; three are taken, so four do not fit.
    provider = SimulatedProvider()
    node = order.instances.get(rank=0)
    for n in range(3):
        other = replace(services.launch_request(node), client_token=f"other-{n}", tags={})
        provider.launch(other)
    tasks.provision_instance.apply(args=[str(node.pk)])
    assert SimulatedHost.objects.filter(tags__has_key=TAG_CLUSTER).count() == 0
    assert set(order.instances.values_list("status", flat=True)) == {S.FAILED}


def test_a_cluster_launch_whose_reply_was_lost_finds_the_same_nodes(cluster, monkeypatch):
    order = cluster(nodes=2)
    original = SimulatedProvider._reply
    lost = {"left": 1}

    def lose_once(self, was_lost, result):
        if isinstance(result, list) and lost["left"]:
            lost["left"] -= 1
            raise ProviderTransientError("Read timeout", code="ReadTimeoutError")
        return original(self, was_lost, result)

    monkeypatch.setattr(SimulatedProvider, "_reply", lose_once)
    nodes = provision_all(order)
    assert [node.status for node in nodes] == [S.RUNNING, S.RUNNING]
    assert SimulatedHost.objects.count() == 2


def test_a_node_cancelled_before_the_launch_ends_the_whole_cluster(cluster, alice):
    order = cluster(nodes=2)
    node = order.instances.get(rank=1)
    services.instance_request_action(instance=node, user=alice, action="terminate")
    nodes = provision_all(order)
    assert SimulatedHost.objects.count() == 0
    assert nodes[0].status == S.FAILED and "whole or not at all" in nodes[0].status_reason


def test_the_reconciler_ends_a_cluster_that_lost_a_node_before_it_ran(cluster, settings):
    settings.PORTAL_SIMULATED_BOOT_SECONDS = 600
    order = cluster(nodes=2)
    nodes = provision_all(order)
    assert [node.status for node in nodes] == [S.PROVISIONING] * 2
    # The cloud ends one node while it boots: that node fails, and its cluster cannot run.
    SimulatedHost.objects.filter(cloud_id=nodes[1].cloud_id).update(
        state="terminated", settles_at=None
    )
    services.reconcile()
    assert Instance.objects.get(pk=nodes[1].pk).status == S.FAILED
    first = Instance.objects.get(pk=nodes[0].pk)
    assert first.status in (S.TERMINATING, S.TERMINATED)
    assert "whole or not at all" in first.events.last().reason


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        ({"nodes": 1}, "nodes", "out_of_range"),
        ({"nodes": 10_000}, "nodes", "out_of_range"),
        ({"nodes": None}, "nodes", "required"),
        ({"count": 2}, "count", "cluster_count"),
        ({"placement": None, "nodes": 2, "count": None}, "nodes", "cluster_only"),
        ({"instance_type": "g5.12xlarge", "efa": True}, "efa", "efa_not_offered"),
        ({"placement": None, "count": 1, "nodes": None, "efa": True}, "efa", "cluster_only"),
        ({"placement": "ring"}, "placement", "invalid_choice"),
    ],
)
def test_a_bad_cluster_order_is_refused_with_a_sentence_and_places_nothing(
    api_as, alice, cluster_body, overrides, field, code
):
    reply = api_as(alice).post("/api/v1/orders/", cluster_body(**overrides), format="json")
    assert reply.status_code == 400, reply.json()
    error = reply.json()
    assert field in json.dumps(error), error
    assert Order.objects.count() == 0 and Instance.objects.count() == 0


def test_a_cluster_is_admitted_as_a_whole(api_as, alice, cluster_body, projects):
    # 2 p4d nodes are 16 GPUs: above a policy's 8, the whole cluster waits for approval.
    ApprovalPolicy.objects.create(project=projects["vision-lab"], gpus_above=8)
    reply = api_as(alice).post("/api/v1/orders/", cluster_body(), format="json")
    assert reply.status_code == 201
    assert reply.json()["status"] == "pending_approval"
    assert "16 GPUs" in reply.json()["approval_reason"]
    assert Instance.objects.count() == 0


def test_reconcile_knows_a_cluster_host_its_worker_died_before_tagging(cluster):
    """EC2 tags a cluster's hosts with their nodes after the launch: a worker that died in
    between leaves hosts known only by their cluster's tag and launch index. Reconcile adopts
    each into its node rather than ending it as an orphan."""
    order = cluster(nodes=2)
    nodes = list(order.instances.order_by("rank"))
    Instance.objects.filter(order=order).update(status=S.PROVISIONING)
    launched = SimulatedProvider().launch_cluster(
        services.cloud.cluster_launch(order, services.clusters.cluster_first_nodes(order))
    )

    class UntaggedUntilNow(SimulatedProvider):
        def find_tagged(self, instance_uuid=None):
            return [
                replace(
                    host,
                    tags={k: v for k, v in host.tags.items() if k != TAG_INSTANCE},
                    launch_index=rank,
                )
                for rank, host in enumerate(launched)
            ]

    report = services.reconcile(provider=UntaggedUntilNow())
    assert sorted(report.adopted) == sorted(host.cloud_id for host in launched)
    assert [Instance.objects.get(pk=n.pk).cloud_id for n in nodes] == [h.cloud_id for h in launched]
    assert report.orphans_terminated == []


def test_reconcile_releases_the_groups_of_a_cluster_only_once_no_node_runs(cluster):
    order = cluster(nodes=2)
    nodes = provision_all(order)
    released = []

    class HoldsGroups(SimulatedProvider):
        def cluster_leftovers(self):
            return {str(order.pk), "not-a-portal-id"}

        def release_cluster(self, cluster_id):
            released.append(cluster_id)
            return True

    services.reconcile(provider=HoldsGroups())
    assert released == ["not-a-portal-id"]  # the portal's cluster still runs
    for node in nodes:
        services.instance_request_terminate(instance=node, user=order.requester)
        tasks.terminate_instance.apply(args=[str(node.pk)])
        services.instance_sync(instance_id=node.pk)
    assert set(order.instances.values_list("status", flat=True)) == {S.TERMINATED}
    released.clear()
    report = services.reconcile(provider=HoldsGroups())
    assert str(order.pk) in released and str(order.pk) in report.clusters_released


def test_a_spot_cluster_replaces_only_the_node_the_cloud_took_with_the_same_rank(cluster, alice):
    order = cluster(nodes=3, market="spot", interruption_policy="relaunch_spot")
    nodes = provision_all(order)
    lost = nodes[1]
    SimulatedProvider().interrupt(lost.cloud_id)
    services.reconcile()
    assert Instance.objects.get(pk=lost.pk).status == S.TERMINATED
    # Only that node: the other two run on, and nothing relaunches the whole cluster.
    assert [Instance.objects.get(pk=n.pk).status for n in (nodes[0], nodes[2])] == [S.RUNNING] * 2
    new = Instance.objects.get(replaces=lost)
    assert new.rank == 1 and order.instances.count() == 4
    told = Notice.objects.get(user=alice, subject__startswith="Spot host interrupted")
    assert "rank 1 of a cluster of 3" in told.body
    assert cluster_tf_config(nodes[0], cluster_members([order.pk])[order.pk]) is None

    new = services.instance_provision(instance_id=new.pk)
    assert new.status == S.RUNNING
    host = SimulatedHost.objects.get(cloud_id=new.cloud_id)
    assert host.tags[TAG_CLUSTER] == str(order.pk)
    assert new.isolation["placement_group"] == nodes[0].isolation["placement_group"]
    assert new.availability_zone == nodes[0].availability_zone  # the placement group's zone
    members = cluster_members([order.pk])[order.pk]
    assert [m.pk for m in members] == [nodes[0].pk, new.pk, nodes[2].pk]
    config = cluster_tf_config(nodes[0], members)
    assert len(config["cluster"]["worker"]) == 3
    assert Notice.objects.filter(user=alice, subject__startswith="Cluster whole again").count() == 1
    services.instance_sync(instance_id=new.pk)  # seen running again: said once
    assert Notice.objects.filter(user=alice, subject__startswith="Cluster whole again").count() == 1


def test_a_project_on_a_dedicated_host_orders_no_cluster(
    api_as, alice, ada, cluster_body, projects
):
    project_isolation_set(
        project=projects["vision-lab"], actor=ada, tenancy="host", host_id="h-0123456789abcdef0"
    )
    reply = api_as(alice).post("/api/v1/orders/", cluster_body(), format="json")
    assert reply.status_code == 400
    assert "takes no placement group" in reply.json()["fields"]["placement"][0]
    assert Order.objects.count() == 0


def test_the_estimate_prices_a_cluster_of_more_nodes_than_an_order_of_hosts(api_as, alice):
    url = "/api/v1/orders/estimate/?instance_type=p4d.24xlarge&lease_hours=10"
    twelve = api_as(alice).get(f"{url}&placement=cluster&count=12")
    assert twelve.status_code == 200, twelve.json()
    one = api_as(alice).get(f"{url}&count=1").json()
    assert Decimal(twelve.json()["per_lease"]) == 12 * Decimal(one["per_lease"])
    assert api_as(alice).get(f"{url}&placement=cluster&count=1").status_code == 400
    assert api_as(alice).get(f"{url}&count=12").status_code == 400  # separate hosts: 8 at most


def test_a_node_cancelled_while_its_launch_was_half_recorded_ends_the_cluster(cluster, alice):
    """A worker died after recording node 0's host and before node 1's; the owner then
    terminates node 1, which never ran. Node 0 must not run on alone."""
    order = cluster(nodes=2)
    nodes = list(order.instances.order_by("rank"))
    Instance.objects.filter(order=order).update(status=S.PROVISIONING)
    hosts = SimulatedProvider().launch_cluster(
        services.cloud.cluster_launch(order, services.clusters.cluster_first_nodes(order))
    )
    services.instance_record_host(nodes[0], hosts[0])
    node = Instance.objects.get(pk=nodes[1].pk)
    services.instance_request_terminate(instance=node, user=alice)
    tasks.terminate_instance.apply(args=[str(node.pk)])
    services.reconcile()
    first = Instance.objects.get(pk=nodes[0].pk)
    assert first.status in (S.TERMINATING, S.TERMINATED)
    assert (
        "ended before the cluster ran" in first.events.filter(new_status=S.TERMINATING).get().reason
    )


def test_a_failed_launch_leaves_the_nodes_another_worker_recorded(cluster):
    order = cluster(nodes=2)
    nodes = list(order.instances.order_by("rank"))
    Instance.objects.filter(order=order).update(status=S.PROVISIONING)
    Instance.objects.filter(pk=nodes[0].pk).update(cloud_id="i-0recordedbyanother")
    services.instance_fail(instance_id=nodes[1].pk, reason="The cloud refused the launch.")
    assert Instance.objects.get(pk=nodes[1].pk).status == S.FAILED
    assert Instance.objects.get(pk=nodes[0].pk).status == S.PROVISIONING


def test_my_hosts_lists_a_clusters_nodes_by_rank_under_one_heading(client, alice, cluster):
    order = cluster(nodes=3, market="spot", interruption_policy="relaunch_spot")
    nodes = provision_all(order)
    SimulatedProvider().interrupt(nodes[1].cloud_id)
    services.reconcile()
    new = services.instance_provision(instance_id=Instance.objects.get(replaces=nodes[1]).pk)
    client.force_login(alice)
    page = client.get("/hosts/").content.decode()
    assert "Cluster of" in page and "one placement group, EFA" in page
    listed = list(dict.fromkeys(re.findall(r"portal-[0-9a-f]{8}", page)))
    # Rank 0, then rank 1 (the replacement, then the node it replaced), then rank 2.
    assert listed == [nodes[0].name, new.name, nodes[1].name, nodes[2].name]


def test_a_page_of_cluster_orders_reads_its_clusters_in_the_same_queries(api_as, alice, cluster):
    def queries_for_the_list() -> int:
        with CaptureQueriesContext(connection) as queries:
            reply = api_as(alice).get("/api/v1/orders/")
        assert reply.status_code == 200
        return len(queries)

    provision_all(cluster(nodes=2))
    one = queries_for_the_list()
    for _ in range(2):  # the simulated cloud runs six p4d.24xlarge: three clusters of two
        provision_all(cluster(nodes=2))
    assert queries_for_the_list() == one
    orders = api_as(alice).get("/api/v1/orders/").json()["results"]
    assert all(host["tf_config"] for order in orders for host in order["instances"])


def test_an_orders_cost_so_far_is_its_nodes_together(api_as, alice, cluster, clock):
    order = cluster(nodes=3)
    provision_all(order)
    clock.shift(timedelta(minutes=90))
    body = api_as(alice).get(f"/api/v1/orders/{order.pk}/").json()
    nodes = [Decimal(host["cost_so_far"]) for host in body["instances"]]
    assert len(nodes) == 3 and all(cost > 0 for cost in nodes)
    assert Decimal(body["cost_so_far"]) == sum(nodes)


def test_the_network_variables_follow_the_type_and_its_efa(catalog):
    efa = network_environment(catalog["p4d.24xlarge"], efa=True)
    assert efa["FI_PROVIDER"] == "efa" and efa["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # No EFA asked: NCCL talks TCP, and names no fabric.
    tcp = network_environment(catalog["p4d.24xlarge"], efa=False)
    assert tcp == {"NCCL_SOCKET_IFNAME": "^lo,docker"}
    # GPUs without GPUDirect RDMA get EFA through host memory.
    assert "FI_EFA_USE_DEVICE_RDMA" not in network_environment(catalog["g5.xlarge"], efa=True)
