"""Fixtures shared by the provider tests: a fake EC2 (moto) and an image to launch in it."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

# The host agent tests' fake portal.
from tests.instances.agent_helpers import portal  # noqa: F401

# The pool tests' fixture (a pool of alice's in vision-lab).
from tests.instances.pool_helpers import make_pool  # noqa: F401

REGION = "us-east-1"


@pytest.fixture
def moto_ec2(monkeypatch, settings):
    """A boto3 EC2 client on a fresh moto cloud, with the portal's EC2 settings pointed at it.

    Fake credentials so nothing can reach AWS; the optional network, profile and KMS settings are
    blank unless a test sets them (after this fixture, before building the provider).
    """
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    settings.AWS_ENDPOINT_URL = ""
    settings.PORTAL_REGION = REGION
    settings.PORTAL_EC2_SUBNET_IDS = []
    settings.PORTAL_EC2_SECURITY_GROUP_IDS = []
    settings.PORTAL_EC2_INSTANCE_PROFILE = ""
    settings.PORTAL_EC2_KMS_KEY_ID = ""
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


@pytest.fixture
def ami_id(moto_ec2) -> str:
    """A registered image in the fake cloud (moto loads none by default, see FACTS.md)."""
    image = moto_ec2.register_image(
        Name="portal-tf-2.20-cuda12.5",
        Architecture="x86_64",
        VirtualizationType="hvm",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
    )
    return image["ImageId"]
