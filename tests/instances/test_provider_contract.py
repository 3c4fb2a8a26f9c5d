"""The provider contract: what the portal may rely on from any cloud, run against each of them.

The simulated cloud runs on the test database; EC2 runs on moto, with the one EC2 behaviour
moto leaves out that the contract depends on (client tokens) added around it.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from decimal import Decimal

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from instances.data import image_rows
from instances.providers.base import (
    TAG_INSTANCE,
    TAG_OWNER,
    TAG_PROJECT,
    CloudHost,
    CloudState,
    LaunchRequest,
    Provider,
    ProviderPermanentError,
)
from instances.providers.ec2 import EC2Provider
from instances.providers.simulated import SimulatedProvider

REGION = "us-east-1"
UNKNOWN_ID = "i-0123456789abcdef0"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPortalContractTestKey alice@example.org"

instant_boot = pytest.mark.parametrize("boot_seconds", [0], ids=["instant-boot"])


class HonourClientTokens:
    """What EC2 does with RunInstances' ClientToken, and moto 5 does not (FACTS.md).

    EC2 remembers a token with the call's parameters: the same token with the same parameters
    returns the first call's reply and launches nothing; with other parameters it fails with
    IdempotentParameterMismatch. Only successful calls are remembered.
    """

    def __init__(self, client) -> None:
        self.seen: dict[str, tuple[dict, dict]] = {}
        client.meta.events.register("before-call.ec2.RunInstances", self.before_call)
        client.meta.events.register("after-call.ec2.RunInstances", self.after_call)

    def before_call(self, params, context, **kwargs):
        body = dict(params["body"])
        token = body.pop("ClientToken")
        context["client_token"] = (token, body)
        if token not in self.seen:
            return None
        first_body, first_reply = self.seen[token]
        if body != first_body:
            raise ClientError(
                {
                    "Error": {
                        "Code": "IdempotentParameterMismatch",
                        "Message": "The client token was already used with other parameters.",
                    }
                },
                "RunInstances",
            )
        # A non-None answer from a before-call handler is the reply; the call is never sent.
        return AWSResponse(params["url"], 200, {}, None), copy.deepcopy(first_reply)

    def after_call(self, http_response, parsed, context, **kwargs):
        token, body = context["client_token"]
        if http_response.status_code < 300:
            self.seen.setdefault(token, (body, copy.deepcopy(parsed)))


@pytest.fixture
def boot_seconds() -> int:
    """A realistic boot delay, so the simulated cloud has moving states as EC2 does; tests that
    need a host to settle within a few describes use ``@instant_boot``."""
    return 6


@pytest.fixture(params=["simulated", "simulated-slow-replies", "ec2"])
def provider(request, settings, db, boot_seconds) -> Provider:
    settings.PORTAL_REGION = REGION
    if request.param.startswith("simulated"):
        settings.PORTAL_SIMULATED_BOOT_SECONDS = boot_seconds
        settings.PORTAL_SIMULATED_API_LATENCY_SECONDS = 0
        settings.PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR = 0
        # The faults that break no promise: a reply that comes late, after the cloud acted.
        # (Lost replies, throttling and ignored tokens break the contract on purpose; their
        # tests are in test_chaos.py.)
        slow = request.param == "simulated-slow-replies"
        settings.PORTAL_SIMULATED_REPLY_LATENCY_SECONDS = 0.005 if slow else 0
        settings.PORTAL_SIMULATED_LOST_REPLY_RATE = 0
        settings.PORTAL_SIMULATED_IGNORE_CLIENT_TOKENS = False
        settings.PORTAL_SIMULATED_THROTTLE_RATE = 0
        provider = SimulatedProvider()
        assert provider.faults.reply_latency == (0.005 if slow else 0)
        return provider
    request.getfixturevalue("moto_ec2")
    ec2 = EC2Provider()
    HonourClientTokens(ec2.client)
    return ec2


@pytest.fixture
def image_id(request, provider) -> str:
    if isinstance(provider, EC2Provider):
        return request.getfixturevalue("ami_id")
    return image_rows()[0]["provider_image_ids"][REGION]


def a_launch_request(image_id: str, **changes) -> LaunchRequest:
    """A request as the provisioner builds it: a fresh instance, its token and its tags."""
    instance_uuid = str(uuid.uuid4())
    request = LaunchRequest(
        client_token=f"portal-{instance_uuid}",
        instance_uuid=instance_uuid,
        instance_type="g5.xlarge",
        image_id=image_id,
        market="on_demand",
        ssh_public_key=SSH_KEY,
        tags={TAG_INSTANCE: instance_uuid, TAG_PROJECT: "vision-lab", TAG_OWNER: "alice"},
    )
    return dataclasses.replace(request, **changes)


@pytest.fixture
def launch_request(image_id):
    return lambda **changes: a_launch_request(**{"image_id": image_id, **changes})


def settle(provider: Provider, cloud_id: str, state: str) -> CloudHost:
    """Describe until the host reaches ``state``: moto and the simulated cloud move a host on a
    later describe, as EC2 does over seconds."""
    for _ in range(5):
        host = provider.describe([cloud_id])[cloud_id]
        if host.state == state:
            break
    return host


def cloud_ids(hosts: list[CloudHost]) -> set[str]:
    return {host.cloud_id for host in hosts}


# --- launch --------------------------------------------------------------------------------


def test_launch_returns_a_pending_or_running_host_with_the_portal_tags(provider, launch_request):
    request = launch_request()
    host = provider.launch(request)
    assert host.cloud_id.startswith("i-")
    assert host.state in (CloudState.PENDING, CloudState.RUNNING)
    assert host.instance_type == "g5.xlarge"
    assert host.market == "on_demand"
    assert request.tags.items() <= host.tags.items()
    assert host.instance_uuid == request.instance_uuid
    assert host.launched_at.tzinfo is not None


def test_launch_of_a_spot_host_reports_the_spot_market(provider, launch_request):
    host = provider.launch(launch_request(market="spot"))
    assert host.market == "spot"
    assert provider.describe([host.cloud_id])[host.cloud_id].market == "spot"


def test_the_same_token_and_parameters_return_the_same_host(provider, launch_request):
    request = launch_request()
    first = provider.launch(request)
    again = provider.launch(request)
    assert again.cloud_id == first.cloud_id
    assert cloud_ids(provider.find_tagged()) == {first.cloud_id}


def test_the_same_token_with_other_parameters_is_refused(provider, launch_request):
    request = launch_request()
    first = provider.launch(request)
    with pytest.raises(ProviderPermanentError) as refused:
        provider.launch(dataclasses.replace(request, instance_type="g6.xlarge"))
    assert refused.value.code == "IdempotentParameterMismatch"
    assert cloud_ids(provider.find_tagged()) == {first.cloud_id}


def test_a_bad_image_id_is_a_permanent_error(provider, launch_request):
    request = launch_request(image_id="ami-00000000000000000")
    with pytest.raises(ProviderPermanentError) as refused:
        provider.launch(request)
    assert refused.value.code == "InvalidAMIID.NotFound"
    assert provider.find_tagged(request.instance_uuid) == []


# --- describe and find_tagged --------------------------------------------------------------


def test_images_found_names_the_images_the_cloud_has_and_no_other(provider, image_id):
    assert provider.images_found([image_id, "ami-0000000000000dead"]) == {image_id}
    assert provider.images_found([]) == set()


def test_describe_returns_known_ids_and_leaves_unknown_ids_out(provider, launch_request):
    host = provider.launch(launch_request())
    described = provider.describe([host.cloud_id, UNKNOWN_ID])
    assert set(described) == {host.cloud_id}
    assert described[host.cloud_id].instance_type == "g5.xlarge"
    assert provider.describe([UNKNOWN_ID]) == {}
    assert provider.describe([]) == {}


def test_find_tagged_finds_one_instance_by_its_portal_tag(provider, launch_request):
    mine, other = launch_request(), launch_request()
    host = provider.launch(mine)
    provider.launch(other)
    found = provider.find_tagged(mine.instance_uuid)
    assert cloud_ids(found) == {host.cloud_id}
    assert found[0].instance_uuid == mine.instance_uuid
    assert provider.find_tagged(str(uuid.uuid4())) == []


def test_find_tagged_lists_live_tagged_hosts_and_not_terminated_ones(provider, launch_request):
    live = provider.launch(launch_request())
    ended = launch_request()
    provider.terminate(provider.launch(ended).cloud_id)
    # Right after terminate a host is shutting down: already gone for the portal's purposes.
    assert cloud_ids(provider.find_tagged()) == {live.cloud_id}
    assert provider.find_tagged(ended.instance_uuid) == []


@instant_boot
def test_find_tagged_leaves_out_terminated_hosts_once_settled(provider, launch_request):
    live = provider.launch(launch_request())
    ended = provider.launch(launch_request())
    provider.terminate(ended.cloud_id)
    assert settle(provider, ended.cloud_id, CloudState.TERMINATED).state == CloudState.TERMINATED
    assert cloud_ids(provider.find_tagged()) == {live.cloud_id}


def test_find_tagged_leaves_out_hosts_without_the_portal_tag(provider, launch_request):
    tagged = provider.launch(launch_request())
    provider.launch(launch_request(tags={TAG_PROJECT: "vision-lab"}))
    assert cloud_ids(provider.find_tagged()) == {tagged.cloud_id}


# --- stop, start, terminate ----------------------------------------------------------------


@instant_boot
def test_an_on_demand_host_stops_and_starts_again(provider, launch_request):
    host = provider.launch(launch_request())
    assert settle(provider, host.cloud_id, CloudState.RUNNING).state == CloudState.RUNNING

    assert provider.stop(host.cloud_id).state in (CloudState.STOPPING, CloudState.STOPPED)
    assert settle(provider, host.cloud_id, CloudState.STOPPED).state == CloudState.STOPPED
    assert provider.stop(host.cloud_id).state == CloudState.STOPPED

    assert provider.start(host.cloud_id).state in (CloudState.PENDING, CloudState.RUNNING)
    assert settle(provider, host.cloud_id, CloudState.RUNNING).state == CloudState.RUNNING
    assert provider.start(host.cloud_id).state == CloudState.RUNNING


def test_stopping_or_starting_an_unknown_host_is_a_permanent_error(provider):
    for action in (provider.stop, provider.start):
        with pytest.raises(ProviderPermanentError) as refused:
            action(UNKNOWN_ID)
        assert refused.value.code == "InvalidInstanceID.NotFound"


@instant_boot
def test_terminate_is_idempotent(provider, launch_request):
    host = provider.launch(launch_request())
    first = provider.terminate(host.cloud_id)
    assert first is not None and first.state in CloudState.GONE
    assert provider.terminate(host.cloud_id).state in CloudState.GONE
    assert settle(provider, host.cloud_id, CloudState.TERMINATED).state == CloudState.TERMINATED
    again = provider.terminate(host.cloud_id)
    assert (again.cloud_id, again.state) == (host.cloud_id, CloudState.TERMINATED)


def test_terminate_of_an_unknown_id_returns_none(provider):
    assert provider.terminate(UNKNOWN_ID) is None


@instant_boot
def test_starting_a_terminated_host_is_refused(provider, launch_request):
    host = provider.launch(launch_request())
    provider.terminate(host.cloud_id)
    assert settle(provider, host.cloud_id, CloudState.TERMINATED).state == CloudState.TERMINATED
    with pytest.raises(ProviderPermanentError) as refused:
        provider.start(host.cloud_id)
    assert refused.value.code == "IncorrectInstanceState"
    assert provider.describe([host.cloud_id])[host.cloud_id].state == CloudState.TERMINATED


def test_starting_a_host_that_is_shutting_down_is_refused(provider, launch_request):
    host = provider.launch(launch_request())
    provider.terminate(host.cloud_id)
    with pytest.raises(ProviderPermanentError) as refused:
        provider.start(host.cloud_id)
    assert refused.value.code == "IncorrectInstanceState"


# --- spot prices ---------------------------------------------------------------------------


def test_spot_prices_are_decimal_quotes_for_the_spot_types_asked_for(provider):
    quotes = provider.spot_prices(["g5.xlarge", "g6.xlarge"])
    assert {quote.instance_type for quote in quotes} == {"g5.xlarge", "g6.xlarge"}
    for quote in quotes:
        assert isinstance(quote.price_per_hour, Decimal)
        assert quote.price_per_hour > 0
        assert quote.region == REGION
        assert quote.at.tzinfo is not None


def test_spot_prices_for_no_types_are_empty(provider):
    assert provider.spot_prices([]) == []
