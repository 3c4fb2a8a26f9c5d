"""Each project's own network, key and tenancy: admins set them (API and page), members read
them, every change is history with old and new values, malformed ids are refused when saved,
and every launch for the project carries them, on EC2 (the request payload, and moto) and on
the simulated cloud, whose hosts' pages say where they run."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber
from django.test import Client

from audit.models import AuditEvent
from instances import services
from instances.models import Image, Instance, SimulatedHost
from instances.providers.base import Isolation
from instances.providers.ec2 import EC2Provider
from instances.services.cloud import launch_isolation, launch_request
from portal.models import Membership, Project, ProjectChange
from portal.services import membership_set, project_isolation_set
from tests.instances.test_ec2_provider import a_request

SUBNET_A = "subnet-0a1b2c3d4e5f67890"
SUBNET_B = "subnet-1b2c3d4e5f678901a"
GROUP = "sg-0123456789abcdef0"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
HOST = "h-0fedcba9876543210"
PROFILE = "arn:aws:iam::123456789012:instance-profile/labs/vision-hosts"
WHOLE = {
    "subnet_ids": [SUBNET_A, SUBNET_B],
    "security_group_ids": [GROUP],
    "kms_key_id": KEY_ARN,
    "tenancy": "dedicated",
    "instance_profile": PROFILE,
}


def url(slug: str = "vision-lab") -> str:
    return f"/api/v1/projects/{slug}/"


@pytest.fixture
def manager(projects, bob):
    membership_set(project=projects["vision-lab"], user=bob, role=Membership.Role.MANAGER)
    return bob


# --- the API ---------------------------------------------------------------------------------


def test_an_admin_sets_a_projects_isolation_and_members_read_it(api_as, ada, alice, projects):
    reply = api_as(ada).patch(url(), WHOLE, format="json")
    assert reply.status_code == 200, reply.json()
    assert {name: reply.json()[name] for name in WHOLE} == WHOLE
    read = api_as(alice).get(url()).json()
    assert {name: read[name] for name in WHOLE} == WHOLE
    assert read["host_id"] == ""
    assert read["launches_with"] == {**WHOLE, "host_id": ""}


def test_a_field_left_empty_launches_with_the_portals_setting(api_as, alice, projects, settings):
    settings.PORTAL_EC2_SUBNET_IDS = [SUBNET_B]
    settings.PORTAL_EC2_SECURITY_GROUP_IDS = [GROUP]
    settings.PORTAL_EC2_KMS_KEY_ID = "alias/portal-default"
    settings.PORTAL_EC2_INSTANCE_PROFILE = "portal-hosts"
    project = projects["vision-lab"]
    project_isolation_set(project=project, actor=None, subnet_ids=[SUBNET_A], tenancy="dedicated")
    project.refresh_from_db()
    assert launch_isolation(project) == Isolation(
        subnet_ids=(SUBNET_A,),
        security_group_ids=(GROUP,),
        kms_key_id="alias/portal-default",
        tenancy="dedicated",
        instance_profile="portal-hosts",
    )
    read = api_as(alice).get(url()).json()
    assert (read["subnet_ids"], read["kms_key_id"]) == ([SUBNET_A], "")
    assert read["launches_with"]["kms_key_id"] == "alias/portal-default"


@pytest.mark.parametrize("who", ["alice", "manager", "fin"])
def test_only_admins_change_it(api_as, request, projects, alice, manager, fin, who):
    user = {"alice": alice, "manager": manager, "fin": fin}[who]
    reply = api_as(user).patch(url(), {"tenancy": "dedicated"}, format="json")
    assert reply.status_code == 403
    assert reply.json()["code"] == "forbidden"
    assert Project.objects.get(slug="vision-lab").tenancy == "default"
    assert not ProjectChange.objects.exists()


def test_a_project_the_caller_cannot_see_is_not_found(api_as, carol, projects):
    assert api_as(carol).patch(url(), {"tenancy": "dedicated"}, format="json").status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"subnet_ids": ["subnet-xyz"]}, "subnet_ids", "is not a subnet id"),
        ({"subnet_ids": [SUBNET_A, SUBNET_A]}, "subnet_ids", "Each subnet id once"),
        ({"subnet_ids": "subnet-0a1b2c3d"}, "subnet_ids", "list"),
        ({"security_group_ids": ["sg-12"]}, "security_group_ids", "is not a security group id"),
        ({"security_group_ids": [SUBNET_A]}, "security_group_ids", "sg-0a1b2c3d4e5f67890"),
        ({"kms_key_id": "my-key"}, "kms_key_id", "is not a KMS key"),
        ({"kms_key_id": "alias/aws/ebs"}, "kms_key_id", "is not a KMS key"),
        ({"kms_key_id": "arn:aws:kms:us-east-1:12:key/x"}, "kms_key_id", "is not a KMS key"),
        ({"tenancy": "shared"}, "tenancy", "is not a valid choice"),
        ({"tenancy": "host"}, "host_id", "give its id"),
        ({"tenancy": "host", "host_id": "h-123"}, "host_id", "is not a dedicated host id"),
        ({"host_id": HOST}, "host_id", "goes with tenancy host"),
        ({"instance_profile": "a role with spaces"}, "instance_profile", "not an instance profile"),
        ({"name": "Renamed"}, "name", "cannot be set"),
    ],
)
def test_a_malformed_value_is_refused_when_saved_and_changes_nothing(
    api_as, ada, projects, body, field, words
):
    api_as(ada).patch(url(), {"subnet_ids": [SUBNET_B]}, format="json")
    before = ProjectChange.objects.count()
    reply = api_as(ada).patch(url(), body, format="json")
    assert reply.status_code == 400, reply.json()
    assert words in " ".join(reply.json()["fields"][field])
    project = Project.objects.get(slug="vision-lab")
    assert (project.subnet_ids, project.tenancy, project.host_id) == ([SUBNET_B], "default", "")
    assert project.name == "Vision Lab"
    assert ProjectChange.objects.count() == before


@pytest.mark.parametrize(
    "key",
    [
        "1234abcd-12ab-34cd-56ef-1234567890ab",
        "mrk-1234abcd12ab34cd56ef1234567890ab",
        "alias/vision-lab",
        KEY_ARN,
        "arn:aws:kms:eu-west-1:123456789012:alias/vision-lab",
        "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    ],
)
def test_each_way_ec2_names_a_kms_key_is_taken(api_as, ada, projects, key):
    reply = api_as(ada).patch(url(), {"kms_key_id": key}, format="json")
    assert reply.status_code == 200, reply.json()
    assert Project.objects.get(slug="vision-lab").kms_key_id == key


def test_every_change_is_history_with_old_and_new_values_and_an_audit_row(api_as, ada, projects):
    api_as(ada).patch(url(), {"tenancy": "host", "host_id": HOST}, format="json")
    api_as(ada).patch(url(), {"tenancy": "host", "host_id": HOST}, format="json")  # no change
    # Leaving host tenancy takes the host id with it.
    api_as(ada).patch(url(), {"tenancy": "dedicated", "kms_key_id": "alias/v"}, format="json")
    history = api_as(ada).get(url() + "history/").json()
    assert [(row["changed_by"], row["before"], row["after"]) for row in history["results"]] == [
        (
            "ada",
            {"tenancy": "host", "host_id": HOST, "kms_key_id": ""},
            {"tenancy": "dedicated", "host_id": "", "kms_key_id": "alias/v"},
        ),
        ("ada", {"tenancy": "default", "host_id": ""}, {"tenancy": "host", "host_id": HOST}),
    ]
    calls = AuditEvent.objects.filter(method="PATCH", path=url())
    assert calls.count() == 3
    assert {row.status for row in calls} == {200}


def test_members_read_the_history_and_outsiders_do_not(api_as, ada, alice, carol, projects):
    project_isolation_set(project=projects["vision-lab"], actor=ada, tenancy="dedicated")
    assert api_as(alice).get(url() + "history/").json()["count"] == 1
    assert api_as(carol).get(url() + "history/").status_code == 404


# --- the launch ------------------------------------------------------------------------------


def test_every_run_instances_for_the_project_carries_its_isolation(moto_ec2, ami_id):
    """The whole payload, as botocore's Stubber sees it: what moto would not keep (tenancy)."""
    ec2 = EC2Provider()
    isolation = Isolation(
        subnet_ids=(SUBNET_A,),
        security_group_ids=(GROUP,),
        kms_key_id=KEY_ARN,
        tenancy="host",
        host_id=HOST,
        instance_profile=PROFILE,
    )
    request = a_request(ami_id, isolation=isolation)
    with Stubber(ec2.client) as stub:
        stub.add_response(
            "describe_images",
            {"Images": [{"ImageId": ami_id, "RootDeviceName": "/dev/xvda"}]},
            {"ImageIds": [ami_id]},
        )
        stub.add_response(
            "describe_subnets",
            {"Subnets": [{"SubnetId": SUBNET_A, "AvailabilityZone": "us-east-1c"}]},
            {"SubnetIds": [SUBNET_A]},
        )
        stub.add_response(
            "run_instances",
            {"Instances": [_described(request, SUBNET_A)]},
            {
                "ClientToken": request.client_token,
                "ImageId": ami_id,
                "InstanceType": "p5.48xlarge",
                "MinCount": 1,
                "MaxCount": 1,
                "UserData": ANY,
                "InstanceInitiatedShutdownBehavior": "terminate",
                "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
                "BlockDeviceMappings": [
                    {
                        "DeviceName": "/dev/xvda",
                        "Ebs": {
                            "VolumeSize": 200,
                            "VolumeType": "gp3",
                            "Encrypted": True,
                            "DeleteOnTermination": True,
                            "KmsKeyId": KEY_ARN,
                        },
                    }
                ],
                "TagSpecifications": ANY,
                "SecurityGroupIds": [GROUP],
                "IamInstanceProfile": {"Arn": PROFILE},
                "Placement": {"Tenancy": "host", "HostId": HOST},
                "SubnetId": SUBNET_A,
            },
        )
        host = ec2.launch(request)
        stub.assert_no_pending_responses()
    assert host.subnet_id == SUBNET_A


def test_dedicated_tenancy_asks_for_dedicated_hardware_and_nothing_else(ami_id, moto_ec2):
    ec2 = EC2Provider()
    sent = []
    ec2.client.meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **kwargs: sent.append(params)
    )
    ec2.launch(a_request(ami_id, isolation=Isolation(tenancy="dedicated")))
    ec2.launch(a_request(ami_id))
    assert sent[0]["Placement"] == {"Tenancy": "dedicated"}
    assert "Placement" not in sent[1]
    assert "SecurityGroupIds" not in sent[1] and "IamInstanceProfile" not in sent[1]


def test_a_projects_host_on_moto_lands_in_its_subnet_with_its_key(
    moto_ec2, ami_id, place_order, alice, projects
):
    """The worker's path: the order's host launches with the project's isolation, and the
    host row keeps where it runs."""
    Image.objects.filter(name="tf-2.17-cuda12.3").update(image_id_overrides={"us-east-1": ami_id})
    vpc = moto_ec2.create_vpc(CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    subnet = moto_ec2.create_subnet(VpcId=vpc, CidrBlock="10.60.1.0/24")["Subnet"]["SubnetId"]
    group = moto_ec2.create_security_group(GroupName="lab", Description="lab", VpcId=vpc)
    key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
    project_isolation_set(
        project=projects["vision-lab"],
        actor=None,
        subnet_ids=[subnet],
        security_group_ids=[group["GroupId"]],
        kms_key_id=key,
    )
    order = place_order(alice)
    instance = services.instance_provision(
        instance_id=order.instances.get().pk, provider=EC2Provider()
    )
    described = moto_ec2.describe_instances(InstanceIds=[instance.cloud_id])
    item = described["Reservations"][0]["Instances"][0]
    assert (item["SubnetId"], item["SecurityGroups"][0]["GroupId"]) == (subnet, group["GroupId"])
    volume_id = item["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    volume = moto_ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    assert (volume["Encrypted"], volume["KmsKeyId"]) == (True, key)
    assert Instance.objects.get(pk=instance.pk).isolation == {
        "subnet_id": subnet,
        "security_group_ids": [group["GroupId"]],
        "kms_key_id": key,
        "tenancy": "default",
        "host_id": "",
        "instance_profile": "",
    }


def test_the_simulated_cloud_records_it_and_the_host_page_says_it(
    running_host, alice, projects, client
):
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-12345678abcd"
    project_isolation_set(
        project=projects["vision-lab"],
        actor=None,
        subnet_ids=[SUBNET_A, SUBNET_B],
        kms_key_id=key,
        tenancy="dedicated",
    )
    instance = running_host()
    recorded = SimulatedHost.objects.get(cloud_id=instance.cloud_id).isolation
    assert recorded == {
        "subnet_id": SUBNET_A,
        "security_group_ids": [],
        "kms_key_id": key,
        "tenancy": "dedicated",
        "host_id": "",
        "instance_profile": "",
    }
    client.force_login(alice)
    page = client.get(f"/hosts/{instance.pk}/").content.decode()
    assert f"encrypted with key …/abcd · dedicated tenancy · subnet {SUBNET_A}" in page, (
        "the host page names the key's end, the tenancy and the subnet"
    )


def test_a_host_launched_before_a_change_keeps_what_it_launched_with(running_host, projects, ada):
    instance = running_host()
    project_isolation_set(project=projects["vision-lab"], actor=ada, tenancy="dedicated")
    assert Instance.objects.get(pk=instance.pk).isolation["tenancy"] == "default"
    assert launch_request(Instance.objects.get(pk=instance.pk)).isolation.tenancy == "dedicated"


def test_a_spot_order_in_a_project_on_a_dedicated_host_is_refused(
    api_as, alice, catalog, projects, order_body
):
    project_isolation_set(project=projects["vision-lab"], actor=None, tenancy="host", host_id=HOST)
    reply = api_as(alice).post("/api/v1/orders/", order_body(market="spot"), format="json")
    assert reply.status_code == 400
    assert "takes no spot hosts" in " ".join(reply.json()["fields"]["market"])
    assert not Instance.objects.exists()
    on_demand = api_as(alice).post("/api/v1/orders/", order_body(), format="json")
    assert on_demand.status_code == 201, on_demand.json()


def _described(request, subnet: str) -> dict:
    from datetime import UTC, datetime

    return {
        "InstanceId": "i-0123456789abcdef0",
        "InstanceType": request.instance_type,
        "State": {"Name": "pending"},
        "LaunchTime": datetime(2026, 12, 4, tzinfo=UTC),
        "Tags": [{"Key": k, "Value": v} for k, v in request.tags.items()],
        "SubnetId": subnet,
        "Placement": {"AvailabilityZone": "us-east-1c", "Tenancy": "host"},
    }


# --- the pages -------------------------------------------------------------------------------


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_changes_it_on_the_projects_page_and_sees_the_history(ada, projects):
    client = _signed_in(ada)
    reply = client.post(
        "/projects/vision-lab/",
        {
            "subnet_ids": f"{SUBNET_A}, {SUBNET_B}",
            "security_group_ids": GROUP,
            "kms_key_id": "alias/vision-lab",
            "tenancy": "dedicated",
            "host_id": "",
            "instance_profile": "",
        },
        follow=True,
    )
    page = reply.content.decode()
    assert "Saved where the hosts of vision-lab run." in page
    assert Project.objects.get(slug="vision-lab").subnet_ids == [SUBNET_A, SUBNET_B]
    assert f"{SUBNET_A}, {SUBNET_B}" in page
    assert "Dedicated instances" in page and "alias/vision-lab" in page
    assert "(default)" in page  # the history's old values: the portal's defaults


def test_a_malformed_id_on_the_page_is_said_at_its_field_and_changes_nothing(ada, projects):
    reply = _signed_in(ada).post(
        "/projects/vision-lab/",
        {"subnet_ids": "subnet-nope", "tenancy": "host", "host_id": ""},
    )
    assert reply.status_code == 400
    page = reply.content.decode()
    assert "&#x27;subnet-nope&#x27; is not a subnet id" in page
    assert Project.objects.get(slug="vision-lab").subnet_ids == []


def test_members_read_the_page_without_the_form_and_cannot_post(alice, projects):
    client = _signed_in(alice)
    page = client.get("/projects/vision-lab/").content.decode()
    assert "Where its hosts run" in page and "the default VPC" in page
    assert "Change where its hosts run" not in page
    assert client.post("/projects/vision-lab/", {"tenancy": "dedicated"}).status_code == 403
    assert Project.objects.get(slug="vision-lab").tenancy == "default"
    assert client.get("/projects/nlp-lab/").status_code == 404


def test_a_pool_cannot_take_a_spot_share_in_a_project_on_a_dedicated_host(
    api_as, alice, projects, make_pool
):
    pool = make_pool(spot_percent=0)
    project_isolation_set(project=projects["vision-lab"], actor=None, tenancy="host", host_id=HOST)
    reply = api_as(alice).patch(f"/api/v1/pools/{pool.pk}/", {"spot_percent": 50}, format="json")
    assert reply.status_code == 400
    assert "takes no spot hosts" in " ".join(reply.json()["fields"]["spot_percent"])
    assert (
        api_as(alice).patch(f"/api/v1/pools/{pool.pk}/", {"max_size": 5}, format="json").status_code
        == 200
    )


def test_a_project_keeps_off_a_dedicated_host_while_a_pool_has_a_spot_share(
    api_as, ada, projects, make_pool
):
    make_pool(name="sweepers", spot_percent=50)
    reply = api_as(ada).patch(url(), {"tenancy": "host", "host_id": HOST}, format="json")
    assert reply.status_code == 400
    assert "first set spot_percent to 0 on the pools sweepers" in " ".join(
        reply.json()["fields"]["tenancy"]
    )
    assert Project.objects.get(slug="vision-lab").tenancy == "default"
    assert api_as(ada).patch(url(), {"tenancy": "dedicated"}, format="json").status_code == 200
