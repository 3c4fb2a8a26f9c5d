"""An EC2 cluster's launch, as botocore's Stubber sees its payloads (moto implements no placement
groups): one placement group, one security group open between the nodes, one RunInstances of
MinCount = MaxCount = nodes with the type's EFA interfaces, then each host tagged with its node."""

from __future__ import annotations

import gzip
import hashlib
import uuid
from datetime import UTC, datetime

import pytest
import yaml
from botocore.stub import ANY, Stubber

from instances.lib.agent import CLUSTER_NODES, USER_DATA_MAX_BYTES
from instances.providers.base import (
    TAG_CLUSTER,
    TAG_INSTANCE,
    ClusterLaunch,
    Isolation,
    LaunchRequest,
    ProviderTransientError,
)
from instances.providers.ec2 import EC2Provider
from instances.providers.ec2_clusters import efa_interfaces

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPortalEc2TestKey alice@example.org"
SUBNET = "subnet-0a1b2c3d4e5f60718"
VPC = "vpc-0123456789abcdef0"
PROJECT_GROUP = "sg-0aaaaaaaaaaaaaaaa"
CLUSTER_GROUP = "sg-0cccccccccccccccc"
AMI = "ami-0123456789abcdef0"


def a_cluster(nodes: int, *, efa: int, subnets=(SUBNET,)) -> ClusterLaunch:
    cluster_id = str(uuid.uuid4())
    requests = []
    for _ in range(nodes):
        node = str(uuid.uuid4())
        requests.append(
            LaunchRequest(
                client_token=f"portal-{uuid.UUID(node).hex}",
                instance_uuid=node,
                instance_type="p4d.24xlarge",
                image_id=AMI,
                market="on_demand",
                ssh_public_key=SSH_KEY,
                agent_token=f"secret-{node[:8]}",
                tags={TAG_INSTANCE: node, "portal:project": "vision-lab"},
                isolation=Isolation(
                    subnet_ids=subnets,
                    security_group_ids=(PROJECT_GROUP,),
                    placement_group=f"portal-cluster-{cluster_id}",
                ),
            )
        )
    return ClusterLaunch(
        cluster_id=cluster_id,
        client_token=f"portal-cluster-{uuid.UUID(cluster_id).hex}",
        nodes=tuple(requests),
        efa_interfaces=efa,
    )


def described(index: int) -> dict:
    return {
        "InstanceId": f"i-0{index:016x}",
        "InstanceType": "p4d.24xlarge",
        "AmiLaunchIndex": index,
        "LaunchTime": datetime(2026, 12, 4, 12, 0, tzinfo=UTC),
        "State": {"Name": "pending", "Code": 0},
        "Placement": {"AvailabilityZone": "us-east-1c"},
        "PrivateIpAddress": f"10.0.0.{10 + index}",
        "SubnetId": SUBNET,
        "Tags": [],
    }


@pytest.fixture
def ec2(moto_ec2, settings) -> EC2Provider:
    settings.PORTAL_DEPLOYMENT = "test"
    return EC2Provider()


def expect_groups(stub: Stubber, cluster: ClusterLaunch) -> None:
    """The placement group, the image's root device, then the cluster's security group in the
    subnet's VPC."""
    stub.add_response(
        "create_placement_group",
        {},
        {
            "GroupName": cluster.name,
            "Strategy": "cluster",
            "TagSpecifications": [
                {
                    "ResourceType": "placement-group",
                    "Tags": [
                        {"Key": TAG_CLUSTER, "Value": cluster.cluster_id},
                        {"Key": "portal:deployment", "Value": "test"},
                    ],
                }
            ],
        },
    )
    expect_image(stub)
    expect_security_group(stub, cluster.cluster_id, made=False)


def expect_image(stub: Stubber) -> None:
    stub.add_response(
        "describe_images",
        {"Images": [{"ImageId": AMI, "RootDeviceName": "/dev/xvda"}]},
        {"ImageIds": [AMI]},
    )


def expect_security_group(stub: Stubber, cluster_id: str, *, made: bool) -> None:
    name = f"portal-cluster-{cluster_id}"
    stub.add_response(
        "describe_subnets",
        {"Subnets": [{"SubnetId": SUBNET, "AvailabilityZone": "us-east-1c", "VpcId": VPC}]},
        {"SubnetIds": [SUBNET]},
    )
    stub.add_response(
        "describe_security_groups",
        {"SecurityGroups": [{"GroupId": CLUSTER_GROUP}] if made else []},
        {
            "Filters": [
                {"Name": "group-name", "Values": [name]},
                {"Name": "vpc-id", "Values": [VPC]},
            ]
        },
    )
    rule = {
        "GroupId": CLUSTER_GROUP,
        "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": CLUSTER_GROUP}]}],
    }
    if made:
        # Its rule is asked for again (a worker may have died before adding it): EC2 says
        # it is there already.
        stub.add_client_error(
            "authorize_security_group_ingress",
            service_error_code="InvalidPermission.Duplicate",
            expected_params=rule,
        )
        return
    stub.add_response(
        "create_security_group",
        {"GroupId": CLUSTER_GROUP},
        {"GroupName": name, "Description": ANY, "VpcId": VPC, "TagSpecifications": ANY},
    )
    stub.add_response("authorize_security_group_ingress", {"Return": True}, rule)


def expect_tags(stub: Stubber, cluster: ClusterLaunch) -> None:
    for rank, node in enumerate(cluster.nodes):
        stub.add_response(
            "create_tags",
            {},
            {
                "Resources": [described(rank)["InstanceId"]],
                "Tags": [
                    {"Key": TAG_INSTANCE, "Value": node.instance_uuid},
                    {"Key": "Name", "Value": f"portal-{node.instance_uuid[:8]}"},
                ],
            },
        )


def test_an_efa_cluster_launches_in_one_call_into_its_placement_and_security_groups(ec2):
    cluster = a_cluster(2, efa=4)
    sent = {}
    with Stubber(ec2.client) as stub:
        expect_groups(stub, cluster)
        stub.add_response(
            "run_instances",
            # EC2 answers the nodes in any order: the launch index says which is which.
            {"Instances": [described(1), described(0)]},
            {
                "ClientToken": cluster.client_token,
                "ImageId": AMI,
                "InstanceType": "p4d.24xlarge",
                "MinCount": 2,
                "MaxCount": 2,
                "UserData": ANY,
                "InstanceInitiatedShutdownBehavior": "terminate",
                "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
                "BlockDeviceMappings": ANY,
                "TagSpecifications": ANY,
                "Placement": {"GroupName": cluster.name},
                "NetworkInterfaces": efa_interfaces(4, SUBNET, [PROJECT_GROUP, CLUSTER_GROUP]),
            },
        )
        expect_tags(stub, cluster)
        ec2.client.meta.events.register(
            "provide-client-params.ec2.RunInstances",
            lambda params, **kwargs: sent.update(params),
        )
        hosts = ec2.launch_cluster(cluster)
        stub.assert_no_pending_responses()
    assert [host.launch_index for host in hosts] == [0, 1]
    assert [host.instance_uuid for host in hosts] == [n.instance_uuid for n in cluster.nodes]
    tags = {t["Key"]: t["Value"] for t in sent["TagSpecifications"][0]["Tags"]}
    assert tags[TAG_CLUSTER] == cluster.cluster_id and TAG_INSTANCE not in tags
    # The EFA interfaces: the primary ENA, then one EFA-only per network card.
    interfaces = sent["NetworkInterfaces"]
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        (1, 0, "efa-only"),
        (2, 0, "efa-only"),
        (3, 0, "efa-only"),
    ]
    assert all(i["Groups"] == [PROJECT_GROUP, CLUSTER_GROUP] for i in interfaces)


def test_every_node_finds_its_own_credential_in_the_shared_user_data(ec2):
    cluster = a_cluster(4, efa=0)
    sent = {}
    with Stubber(ec2.client) as stub:
        expect_groups(stub, cluster)
        stub.add_response("run_instances", {"Instances": [described(i) for i in range(4)]}, None)
        expect_tags(stub, cluster)
        ec2.client.meta.events.register(
            "provide-client-params.ec2.RunInstances",
            lambda params, **kwargs: sent.update(params),
        )
        ec2.launch_cluster(cluster)
    # Without EFA the nodes take the subnet and both groups directly.
    assert sent["SubnetId"] == SUBNET
    assert sent["SecurityGroupIds"] == [PROJECT_GROUP, CLUSTER_GROUP]
    assert "NetworkInterfaces" not in sent
    assert len(sent["UserData"].encode()) <= USER_DATA_MAX_BYTES
    config = yaml.safe_load(sent["UserData"])
    table = next(f["content"] for f in config["write_files"] if f["path"] == CLUSTER_NODES)
    assert table.splitlines() == [
        f"{rank} {node.instance_uuid} {node.agent_token}" for rank, node in enumerate(cluster.nodes)
    ]
    env = next(f["content"] for f in config["write_files"] if f["path"] == "/etc/portal-agent.env")
    assert "PORTAL_AGENT_TOKEN" not in env  # a node's own is picked by its launch index
    # The pick runs before the agents start.
    assert "ami-launch-index" in str(config["runcmd"][0])
    assert config["runcmd"][1] == ["systemctl", "daemon-reload"]


def test_a_repeat_finds_the_placement_and_security_groups_it_made(ec2):
    cluster = a_cluster(2, efa=0)
    with Stubber(ec2.client) as stub:
        stub.add_client_error(
            "create_placement_group", service_error_code="InvalidPlacementGroup.Duplicate"
        )
        expect_image(stub)
        expect_security_group(stub, cluster.cluster_id, made=True)
        stub.add_response("run_instances", {"Instances": [described(0), described(1)]})
        expect_tags(stub, cluster)
        hosts = ec2.launch_cluster(cluster)
        stub.assert_no_pending_responses()
    assert len(hosts) == 2


def test_a_cluster_ec2_has_no_room_for_is_a_shortage_worth_retrying(ec2):
    cluster = a_cluster(2, efa=4)
    with Stubber(ec2.client) as stub:
        expect_groups(stub, cluster)
        stub.add_client_error("run_instances", service_error_code="InsufficientInstanceCapacity")
        with pytest.raises(ProviderTransientError) as refused:
            ec2.launch_cluster(cluster)
    assert refused.value.code == "InsufficientInstanceCapacity"


def test_an_ended_clusters_groups_are_deleted_once_ec2_lets_them_go(ec2):
    cluster = a_cluster(2, efa=0)
    mine = [
        {"Name": "tag-key", "Values": [TAG_CLUSTER]},
        {"Name": "tag:portal:deployment", "Values": ["test"]},
    ]
    tags = [{"Key": TAG_CLUSTER, "Value": cluster.cluster_id}]
    with Stubber(ec2.client) as stub:
        stub.add_response(
            "describe_placement_groups",
            {"PlacementGroups": [{"GroupName": cluster.name, "Tags": tags}]},
            {"Filters": mine},
        )
        stub.add_response(
            "describe_security_groups",
            {"SecurityGroups": [{"GroupId": CLUSTER_GROUP, "Tags": tags}]},
            {"Filters": mine},
        )
        assert ec2.cluster_leftovers() == {cluster.cluster_id}
        # A node still shutting down holds the security group: not yet.
        for answer in ("DependencyViolation", None):
            stub.add_response(
                "describe_security_groups",
                {"SecurityGroups": [{"GroupId": CLUSTER_GROUP}]},
                {"Filters": [{"Name": "group-name", "Values": [cluster.name]}, mine[1]]},
            )
            if answer:
                stub.add_client_error("delete_security_group", service_error_code=answer)
            else:
                stub.add_response("delete_security_group", {}, {"GroupId": CLUSTER_GROUP})
                stub.add_response("delete_placement_group", {}, {"GroupName": cluster.name})
        assert ec2.release_cluster(cluster.cluster_id) is False
        assert ec2.release_cluster(cluster.cluster_id) is True
        stub.assert_no_pending_responses()


def test_a_replacement_node_launches_alone_into_its_clusters_groups_and_subnet(ec2):
    cluster = a_cluster(2, efa=4)
    node = cluster.nodes[1]
    replacement = LaunchRequest(
        **{
            **node.__dict__,
            "client_token": "portal-replacement-of-rank-1",
            "tags": node.tags | {TAG_CLUSTER: cluster.cluster_id},
            "efa_interfaces": 4,
            "zone": "us-east-1c",
        }
    )
    sent = {}
    with Stubber(ec2.client) as stub:
        expect_image(stub)
        expect_security_group(stub, cluster.cluster_id, made=True)
        stub.add_response("run_instances", {"Instances": [described(0)]})
        ec2.client.meta.events.register(
            "provide-client-params.ec2.RunInstances",
            lambda params, **kwargs: sent.update(params),
        )
        ec2.launch(replacement)
        stub.assert_no_pending_responses()
    assert sent["MinCount"] == sent["MaxCount"] == 1
    assert sent["Placement"] == {"GroupName": cluster.name}
    assert sent["NetworkInterfaces"] == efa_interfaces(4, SUBNET, [PROJECT_GROUP, CLUSTER_GROUP])
    assert "SecurityGroupIds" not in sent and "SubnetId" not in sent


def test_two_workers_making_the_security_group_at_once_both_use_the_one_made(ec2):
    name = "portal-cluster-abc"
    with Stubber(ec2.client) as stub:
        stub.add_response("describe_security_groups", {"SecurityGroups": []})
        stub.add_client_error("create_security_group", service_error_code="InvalidGroup.Duplicate")
        stub.add_response(
            "describe_security_groups",
            {"SecurityGroups": [{"GroupId": CLUSTER_GROUP}]},
            {"Filters": [{"Name": "group-name", "Values": [name]}]},
        )
        stub.add_response("authorize_security_group_ingress", {"Return": True})
        assert ec2._cluster_security_group("abc", "") == CLUSTER_GROUP
        stub.assert_no_pending_responses()


def test_hosts_ec2_cannot_tag_yet_are_a_launch_worth_retrying(ec2):
    cluster = a_cluster(2, efa=0)
    with Stubber(ec2.client) as stub:
        expect_groups(stub, cluster)
        stub.add_response("run_instances", {"Instances": [described(0), described(1)]})
        stub.add_client_error("create_tags", service_error_code="InvalidInstanceID.NotFound")
        with pytest.raises(ProviderTransientError) as retry:
            ec2.launch_cluster(cluster)
    assert retry.value.code == "InvalidInstanceID.NotFound"


def test_sixteen_nodes_credentials_fit_ec2s_16_kb_gzipped(ec2, settings):
    """Every node's credential rides in the one user data, with both agents and a long RSA
    key: past 16 KB as text, so it goes gzipped (cloud-init unpacks it), the same bytes on a
    retry."""
    settings.PORTAL_EC2_NOTEBOOKS = True
    rsa = "ssh-rsa " + "A" * 716 + " alice@laptop"
    cluster = a_cluster(16, efa=0)
    cluster = ClusterLaunch(
        **{
            **cluster.__dict__,
            "nodes": tuple(
                LaunchRequest(
                    **{
                        **n.__dict__,
                        "ssh_public_key": rsa,
                        "notebook_user": "ubuntu",
                        # As long as a real one (instances/services/telemetry.py agent_secret).
                        "agent_token": "gpa_"
                        + hashlib.sha256(n.instance_uuid.encode()).hexdigest(),
                    }
                )
                for n in cluster.nodes
            ),
        }
    )
    sent = []
    for _ in range(2):
        with Stubber(ec2.client) as stub:
            stub.add_response("create_placement_group", {})
            expect_image(stub)
            if not sent:
                expect_security_group(stub, cluster.cluster_id, made=False)
            else:
                stub.add_response(
                    "describe_security_groups", {"SecurityGroups": [{"GroupId": CLUSTER_GROUP}]}
                )
                stub.add_response("authorize_security_group_ingress", {"Return": True})
            stub.add_response("run_instances", {"Instances": [described(i) for i in range(16)]})
            expect_tags(stub, cluster)
            ec2.client.meta.events.register(
                "provide-client-params.ec2.RunInstances",
                lambda params, **kwargs: sent.append(params["UserData"]),
            )
            ec2.launch_cluster(cluster)
    packed = sent[0]
    assert isinstance(packed, bytes) and len(packed) <= USER_DATA_MAX_BYTES
    assert sent[1] == packed  # no timestamp in the gzip header: a retry sends the same bytes
    text = gzip.decompress(packed).decode()
    assert len(text.encode()) > USER_DATA_MAX_BYTES
    config = yaml.safe_load(text)
    table = next(f["content"] for f in config["write_files"] if f["path"] == CLUSTER_NODES)
    assert len(table.splitlines()) == 16
