"""EC2 launches over several zones: a zone without capacity sends the launch to the next subnet,
a spot replacement tries the zone that lost its host last, and one ClientToken covers them all."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from instances.providers.base import Isolation, ProviderTransientError
from instances.providers.ec2 import EC2Provider
from tests.instances.test_ec2_provider import a_request as one_request


@pytest.fixture
def zones(moto_ec2) -> dict[str, str]:
    """Three subnets of one VPC, one per zone, in zone order; zone -> subnet."""
    vpc = moto_ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    subnets = {}
    for number, zone in enumerate(["us-east-1a", "us-east-1b", "us-east-1c"], start=1):
        subnets[zone] = moto_ec2.create_subnet(
            VpcId=vpc, CidrBlock=f"10.50.{number}.0/24", AvailabilityZone=zone
        )["Subnet"]["SubnetId"]
    return subnets


@pytest.fixture
def a_request(zones):
    """A launch request for hosts of a project with the three subnets."""
    isolation = Isolation(subnet_ids=tuple(zones.values()))
    return lambda image_id, **changes: one_request(image_id, isolation=isolation, **changes)


@pytest.fixture
def ec2(zones) -> EC2Provider:
    return EC2Provider()


@pytest.fixture
def cloud(ec2, monkeypatch):
    """EC2 as moto plays it, except that the zones in `full` answer InsufficientInstanceCapacity
    and the zones in `token_taken` answer IdempotentParameterMismatch; every call is recorded."""
    run = ec2.client.run_instances

    class Cloud:
        full: set[str] = set()
        token_taken: set[str] = set()
        calls: list[dict] = []

    def run_instances(**params):
        Cloud.calls.append(params)
        zone = ec2._zones[params["SubnetId"]]
        for code, refusing in [
            ("InsufficientInstanceCapacity", Cloud.full),
            ("IdempotentParameterMismatch", Cloud.token_taken),
        ]:
            if zone in refusing:
                error = {"Error": {"Code": code, "Message": f"{code} in {zone}"}}
                raise ClientError(error, "RunInstances")
        return run(**params)

    monkeypatch.setattr(ec2.client, "run_instances", run_instances)
    return Cloud


def live_hosts(moto_ec2) -> list[dict]:
    reply = moto_ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    return [item for r in reply["Reservations"] for item in r["Instances"]]


def test_a_launch_goes_to_the_first_configured_zone(a_request, ec2, cloud, ami_id):
    assert ec2.launch(a_request(ami_id, market="spot")).availability_zone == "us-east-1a"
    assert len(cloud.calls) == 1


def test_a_zone_without_capacity_sends_the_launch_to_the_next_one_with_the_same_token(
    a_request, ec2, cloud, ami_id, moto_ec2
):
    cloud.full = {"us-east-1a"}
    request = a_request(ami_id, market="spot")
    host = ec2.launch(request)
    assert host.availability_zone == "us-east-1b"
    assert [call["ClientToken"] for call in cloud.calls] == [request.client_token] * 2
    assert [host["InstanceId"] for host in live_hosts(moto_ec2)] == [host.cloud_id]


def test_a_replacement_tries_the_zone_that_lost_its_host_last(a_request, ec2, cloud, ami_id, zones):
    host = ec2.launch(a_request(ami_id, market="spot", avoid_zone="us-east-1a"))
    assert host.availability_zone == "us-east-1b"
    # Only when every other zone is full does it go back where the capacity was taken.
    cloud.full = {"us-east-1b", "us-east-1c"}
    cloud.calls.clear()
    host = ec2.launch(a_request(ami_id, market="spot", avoid_zone="us-east-1a"))
    assert host.availability_zone == "us-east-1a"
    assert [call["SubnetId"] for call in cloud.calls] == [
        zones["us-east-1b"],
        zones["us-east-1c"],
        zones["us-east-1a"],
    ]


def test_no_capacity_in_any_zone_is_worth_retrying_later_and_launches_nothing(
    a_request, ec2, cloud, ami_id, moto_ec2
):
    cloud.full = {"us-east-1a", "us-east-1b", "us-east-1c"}
    with pytest.raises(ProviderTransientError) as error:
        ec2.launch(a_request(ami_id, market="spot"))
    assert error.value.code == "InsufficientInstanceCapacity"
    assert "us-east-1a, us-east-1b, us-east-1c" in str(error.value)
    assert live_hosts(moto_ec2) == []


def test_a_token_already_used_in_another_zone_answers_with_that_host(
    a_request, ec2, cloud, ami_id, moto_ec2
):
    # The first try found 1a full and launched in 1b, and its reply was lost. The retry finds
    # room in 1a, where EC2 refuses the token (it launched elsewhere): the host is the 1b one.
    cloud.full = {"us-east-1a"}
    request = a_request(ami_id, market="spot")
    first = ec2.launch(request)
    cloud.full = set()
    cloud.token_taken = {"us-east-1a"}
    again = ec2.launch(request)
    assert again.cloud_id == first.cloud_id
    assert len(live_hosts(moto_ec2)) == 1


def test_a_token_taken_but_not_yet_visible_is_worth_asking_again(a_request, ec2, cloud, ami_id):
    cloud.token_taken = {"us-east-1a"}
    with pytest.raises(ProviderTransientError) as error:
        ec2.launch(a_request(ami_id, market="spot"))
    assert error.value.code == "IdempotentParameterMismatch"
