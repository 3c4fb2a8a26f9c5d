"""EC2 launch parameters, read back from what moto recorded, and EC2's errors, from a Stubber."""

from __future__ import annotations

import base64
import gzip
import uuid
from decimal import Decimal

import boto3
import pytest
import yaml
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from instances.lib.agent import USER_DATA_MAX_BYTES
from instances.providers.base import (
    TAG_INSTANCE,
    TAG_OWNER,
    TAG_PROJECT,
    Isolation,
    LaunchRequest,
    ProviderPermanentError,
    ProviderTransientError,
)
from instances.providers.ec2 import EC2Provider

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPortalEc2TestKey alice@example.org"


@pytest.fixture
def ec2(moto_ec2) -> EC2Provider:
    return EC2Provider()


@pytest.fixture
def launch(ec2, ami_id):
    """Launch one host as the provisioner would; returns its description as moto records it."""

    def run(**changes) -> dict:
        instance_uuid = str(uuid.uuid4())
        fields = {
            "client_token": f"portal-{instance_uuid}",
            "instance_uuid": instance_uuid,
            "instance_type": "g5.xlarge",
            "image_id": ami_id,
            "market": "on_demand",
            "ssh_public_key": SSH_KEY,
            "tags": {TAG_INSTANCE: instance_uuid, TAG_PROJECT: "vision-lab", TAG_OWNER: "alice"},
        }
        host = ec2.launch(LaunchRequest(**(fields | changes)))
        reply = ec2.client.describe_instances(InstanceIds=[host.cloud_id])
        return reply["Reservations"][0]["Instances"][0]

    return run


@pytest.fixture
def sent_to_run_instances(ec2) -> list[dict]:
    """The parameters of every RunInstances call, for what moto does not keep (spot options)."""
    calls: list[dict] = []
    ec2.client.meta.events.register(
        "provide-client-params.ec2.RunInstances", lambda params, **kwargs: calls.append(params)
    )
    return calls


def tags_of(item: dict) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in item.get("Tags", [])}


def root_volume(moto_ec2, instance: dict) -> dict:
    mapping = next(
        m for m in instance["BlockDeviceMappings"] if m["DeviceName"] == instance["RootDeviceName"]
    )
    return moto_ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"][0]


# --- what a launched host looks like in the cloud ------------------------------------------


def cloud_config(moto_ec2, instance: dict) -> dict:
    """The cloud-config cloud-init reads from the host's user data."""
    reply = moto_ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    return yaml.safe_load(base64.b64decode(reply["UserData"]["Value"]).decode())


def test_launch_requires_imdsv2(launch):
    instance = launch()
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert instance["MetadataOptions"]["HttpEndpoint"] == "enabled"


def test_a_host_that_shuts_itself_down_is_terminated(moto_ec2, launch):
    instance = launch()
    reply = moto_ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
    )
    assert reply["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


def test_the_root_volume_is_encrypted_gp3_of_the_configured_size(moto_ec2, launch, settings):
    settings.PORTAL_EC2_ROOT_VOLUME_GB = 300
    instance = launch()
    volume = root_volume(moto_ec2, instance)
    assert volume["Encrypted"] is True
    assert (volume["Size"], volume["VolumeType"]) == (300, "gp3")
    mapping = instance["BlockDeviceMappings"][0]
    assert mapping["Ebs"]["DeleteOnTermination"] is True


def test_the_root_volume_is_encrypted_with_the_projects_kms_key(moto_ec2, launch):
    key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]
    volume = root_volume(moto_ec2, launch(isolation=Isolation(kms_key_id=key["Arn"])))
    assert volume["Encrypted"] is True
    assert volume["KmsKeyId"] == key["Arn"]


def test_the_instance_and_its_volume_carry_the_portal_tags(moto_ec2, launch):
    instance = launch()
    expected = {
        TAG_INSTANCE: tags_of(instance)[TAG_INSTANCE],
        TAG_PROJECT: "vision-lab",
        TAG_OWNER: "alice",
    }
    assert expected.items() <= tags_of(instance).items()
    assert tags_of(instance)["Name"] == f"portal-{expected[TAG_INSTANCE][:8]}"
    assert expected.items() <= tags_of(root_volume(moto_ec2, instance)).items()


def test_the_researchers_key_reaches_cloud_init_as_a_cloud_config(moto_ec2, launch):
    instance = launch()
    reply = moto_ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    user_data = base64.b64decode(reply["UserData"]["Value"]).decode()
    assert user_data.startswith("#cloud-config\n")
    # What cloud-init reads: the key, whole, as the one authorized key (quoted, so that a
    # comment with YAML syntax in it cannot become config).
    assert yaml.safe_load(user_data) == {"ssh_authorized_keys": [SSH_KEY]}


def test_without_network_settings_the_host_goes_to_the_default_subnet(moto_ec2, launch):
    instance = launch()
    default_vpc = moto_ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])
    assert instance["VpcId"] == default_vpc["Vpcs"][0]["VpcId"]


def test_the_host_goes_to_the_projects_subnet_and_security_groups(moto_ec2, launch):
    vpc = moto_ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnet = moto_ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24")["Subnet"]["SubnetId"]
    groups = [
        moto_ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
        for name in ("portal-ssh", "portal-egress")
    ]
    instance = launch(isolation=Isolation(subnet_ids=(subnet,), security_group_ids=tuple(groups)))
    assert (instance["SubnetId"], instance["VpcId"]) == (subnet, vpc)
    assert {group["GroupId"] for group in instance["SecurityGroups"]} == set(groups)


@pytest.mark.parametrize("by", ["name", "arn"])
def test_the_host_gets_the_projects_instance_profile(launch, by):
    iam = boto3.client("iam", region_name="us-east-1")
    profile = iam.create_instance_profile(InstanceProfileName="portal-host")["InstanceProfile"]
    named = profile["InstanceProfileName" if by == "name" else "Arn"]
    assert (
        launch(isolation=Isolation(instance_profile=named))["IamInstanceProfile"]["Arn"]
        == (profile["Arn"])
    )


def test_a_spot_launch_asks_for_a_one_time_spot_host_under_the_max_price(
    launch, sent_to_run_instances
):
    instance = launch(market="spot", max_spot_price=Decimal("0.4500"))
    assert instance["InstanceLifecycle"] == "spot"
    # moto keeps only the lifecycle, so the rest is read from the request itself.
    assert sent_to_run_instances[-1]["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
            "MaxPrice": "0.4500",
        },
    }


def test_a_spot_launch_without_a_max_price_leaves_it_to_ec2(launch, sent_to_run_instances):
    launch(market="spot")
    assert "MaxPrice" not in sent_to_run_instances[-1]["InstanceMarketOptions"]["SpotOptions"]


def test_an_on_demand_launch_sends_no_market_options(launch, sent_to_run_instances):
    instance = launch()
    assert "InstanceLifecycle" not in instance
    assert "InstanceMarketOptions" not in sent_to_run_instances[-1]


def test_every_launch_carries_the_requests_client_token(launch, sent_to_run_instances):
    instance = launch(client_token="portal-token-from-the-instance-row")
    assert sent_to_run_instances[-1]["ClientToken"] == "portal-token-from-the-instance-row"
    assert instance["ClientToken"] == "portal-token-from-the-instance-row"


# --- EC2's errors --------------------------------------------------------------------------


@pytest.fixture
def refuse_run_instances(ec2, ami_id):
    """EC2 answering RunInstances with an error code; the image lookup before it succeeds."""

    def refuse(code: str) -> Stubber:
        stub = Stubber(ec2.client)
        stub.add_response(
            "describe_images",
            {"Images": [{"ImageId": ami_id, "RootDeviceName": "/dev/sda1"}]},
            {"ImageIds": [ami_id]},
        )
        stub.add_client_error(
            "run_instances", service_error_code=code, service_message=f"{code} from EC2"
        )
        return stub

    return refuse


def a_request(image_id: str, **changes) -> LaunchRequest:
    instance_uuid = str(uuid.uuid4())
    fields = {
        "client_token": f"portal-{instance_uuid}",
        "instance_uuid": instance_uuid,
        "instance_type": "p5.48xlarge",
        "image_id": image_id,
        "market": "on_demand",
        "ssh_public_key": SSH_KEY,
        "tags": {TAG_INSTANCE: instance_uuid},
    }
    return LaunchRequest(**(fields | changes))


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InsufficientInstanceCapacity"])
def test_throttling_and_capacity_shortages_are_worth_retrying(
    ec2, ami_id, refuse_run_instances, code
):
    with refuse_run_instances(code), pytest.raises(ProviderTransientError) as error:
        ec2.launch(a_request(ami_id))
    assert error.value.code == code
    assert code in str(error.value)


@pytest.mark.parametrize(
    "code",
    ["InvalidParameterValue", "Unsupported", "InstanceLimitExceeded", "UnauthorizedOperation"],
)
def test_other_launch_errors_are_permanent(ec2, ami_id, refuse_run_instances, code):
    with refuse_run_instances(code), pytest.raises(ProviderPermanentError) as error:
        ec2.launch(a_request(ami_id))
    assert error.value.code == code


def test_a_throttled_describe_is_worth_retrying(ec2):
    with Stubber(ec2.client) as stub:
        stub.add_client_error("describe_instances", service_error_code="RequestLimitExceeded")
        with pytest.raises(ProviderTransientError):
            ec2.describe(["i-0123456789abcdef0"])


def test_a_throttled_terminate_is_not_mistaken_for_an_unknown_host(ec2):
    with Stubber(ec2.client) as stub:
        stub.add_client_error("terminate_instances", service_error_code="RequestLimitExceeded")
        with pytest.raises(ProviderTransientError):
            ec2.terminate("i-0123456789abcdef0")


def test_an_unreachable_endpoint_is_worth_retrying(ec2):
    def unreachable(**kwargs):
        raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

    ec2.client.meta.events.register("before-call.ec2.DescribeInstances", unreachable)
    with pytest.raises(ProviderTransientError) as error:
        ec2.describe(["i-0123456789abcdef0"])
    assert error.value.code == "EndpointConnectionError"


def test_cloud_init_installs_the_gpu_agent_with_the_hosts_own_credential(
    moto_ec2, launch, settings
):
    settings.PORTAL_AGENT_URL = "https://portal.example.org"
    instance = launch(agent_token="gpa_secret")
    config = cloud_config(moto_ec2, instance)
    assert config["ssh_authorized_keys"] == [SSH_KEY]
    files = {item["path"]: item for item in config["write_files"]}
    env = files["/etc/portal-agent.env"]
    assert env["permissions"] == "0600"
    assert "PORTAL_AGENT_TOKEN=gpa_secret\n" in env["content"]
    assert "PORTAL_AGENT_URL=https://portal.example.org\n" in env["content"]
    # The programs go gzipped (gz+b64): EC2 takes at most 16 KB of user data.
    for path in ("/usr/local/bin/portal-gpu-agent", "/usr/local/bin/tfevents.py"):
        assert files[path]["encoding"] == "gz+b64"
        program = gzip.decompress(base64.b64decode(files[path]["content"])).decode()
        compile(program, path, "exec")
    agent = files["/usr/local/bin/portal-gpu-agent"]["content"]
    assert "nvidia-smi" in gzip.decompress(base64.b64decode(agent)).decode()
    reply = moto_ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    assert len(base64.b64decode(reply["UserData"]["Value"])) <= USER_DATA_MAX_BYTES
    assert ["systemctl", "enable", "--now", "portal-gpu-agent.timer"] in config["runcmd"]
    assert ["systemctl", "enable", "--now", "portal-job-agent.service"] in config["runcmd"]


def test_cloud_init_runs_the_job_agent_as_a_service_that_stops_its_job_gracefully(
    moto_ec2, launch, settings
):
    settings.PORTAL_AGENT_URL = "https://portal.example.org"
    instance = launch(agent_token="gpa_secret")
    config = cloud_config(moto_ec2, instance)
    files = {item["path"]: item for item in config["write_files"]}
    unit = files["/etc/systemd/system/portal-job-agent.service"]["content"].splitlines()
    assert "ExecStart=/usr/bin/python3 /usr/local/bin/portal-gpu-agent jobs" in unit
    assert "EnvironmentFile=/etc/portal-agent.env" in unit
    assert "Environment=PORTAL_AGENT_IMDS_URL=http://169.254.169.254" in unit
    assert {"Restart=always", "RestartSec=5", "KillMode=process"} <= set(unit)
    # systemd's SIGTERM reaches the agent, which gives the job its grace (30 s by default).
    (stop,) = [line for line in unit if line.startswith("TimeoutStopSec=")]
    assert int(stop.removeprefix("TimeoutStopSec=")) > 300
    assert "WantedBy=multi-user.target" in unit
    # The telemetry timer stays beside it.
    assert config["runcmd"][-2:] == [
        ["systemctl", "enable", "--now", "portal-gpu-agent.timer"],
        ["systemctl", "enable", "--now", "portal-job-agent.service"],
    ]


def test_the_checkpoint_location_reaches_the_hosts_environment_through_cloud_init(moto_ec2, launch):
    uri = "s3://lab-checkpoints/vision-lab/0b0e/"
    instance = launch(environment={"PORTAL_CHECKPOINT_URI": uri})
    config = cloud_config(moto_ec2, instance)
    assert config["ssh_authorized_keys"] == [SSH_KEY]
    assert config["write_files"] == [
        {
            "path": "/etc/environment",
            "append": True,
            "content": f'PORTAL_CHECKPOINT_URI="{uri}"\n',
        }
    ]


def test_an_agent_and_a_checkpoint_share_one_write_files_list(moto_ec2, launch, settings):
    settings.PORTAL_AGENT_URL = "https://portal.example.org"
    uri = "s3://lab-checkpoints/vision-lab/0b0e/"
    instance = launch(agent_token="gpa_secret", environment={"PORTAL_CHECKPOINT_URI": uri})
    config = cloud_config(moto_ec2, instance)
    files = {item["path"]: item for item in config["write_files"]}
    assert files["/etc/environment"]["content"] == f'PORTAL_CHECKPOINT_URI="{uri}"\n'
    assert "PORTAL_AGENT_TOKEN=gpa_secret\n" in files["/etc/portal-agent.env"]["content"]
    assert ["systemctl", "enable", "--now", "portal-gpu-agent.timer"] in config["runcmd"]


def test_ec2_offers_notebooks_only_when_the_deployer_says_the_portal_reaches_its_hosts(
    ec2, launch, settings
):
    assert EC2Provider.offers_notebooks() is False
    instance = launch(agent_token="gpa_secret")
    with pytest.raises(ProviderPermanentError, match="PORTAL_EC2_NOTEBOOKS=0"):
        ec2.notebook_start(instance["InstanceId"], instance_id="x", base_url="/n/", token="t")
    settings.PORTAL_EC2_NOTEBOOKS = True
    settings.PORTAL_NOTEBOOK_PORT = 8890
    assert EC2Provider.offers_notebooks() is True
    address = ec2.notebook_start(instance["InstanceId"], instance_id="x", base_url="/n/", token="t")
    assert address == f"{instance['PrivateIpAddress']}:8890"


def test_cloud_init_runs_the_notebook_agent_as_the_images_login_when_asked(
    moto_ec2, launch, settings
):
    without = cloud_config(moto_ec2, launch(agent_token="gpa_secret"))
    assert "/usr/local/bin/portal-notebook-agent" not in {f["path"] for f in without["write_files"]}
    instance = launch(agent_token="gpa_secret", notebook_user="ubuntu")
    config = cloud_config(moto_ec2, instance)
    files = {item["path"]: item for item in config["write_files"]}
    program = files["/usr/local/bin/portal-notebook-agent"]
    assert program["permissions"] == "0755" and program["encoding"] == "gz+b64"
    compile(gzip.decompress(base64.b64decode(program["content"])).decode(), "agent", "exec")
    unit = files["/etc/systemd/system/portal-notebook-agent.service"]["content"].splitlines()
    assert "ExecStart=/usr/bin/python3 /usr/local/bin/portal-notebook-agent" in unit
    assert "Environment=PORTAL_AGENT_NOTEBOOK_USER=ubuntu" in unit
    assert {"Restart=always", "KillMode=process", "EnvironmentFile=/etc/portal-agent.env"} <= set(
        unit
    )
    assert config["runcmd"][-1] == ["systemctl", "enable", "--now", "portal-notebook-agent.service"]
    reply = moto_ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    assert len(base64.b64decode(reply["UserData"]["Value"])) <= USER_DATA_MAX_BYTES
