"""The simulated cloud gives addresses as a cloud does: never one address to two live hosts."""

from __future__ import annotations

import hashlib
import ipaddress

import pytest

from instances.data import image_rows
from instances.models import SimulatedHost
from instances.providers.faults import unit_hash
from instances.providers.simulated import SimulatedProvider
from tests.instances.test_provider_contract import REGION, a_launch_request

pytestmark = pytest.mark.django_db


def _drawn(provider: SimulatedProvider, client_token: str, network: str) -> str:
    """The address the seed draws for a launch under this token (its cloud id's hash)."""
    cloud_id = "i-" + hashlib.sha256(client_token.encode()).hexdigest()[:17]
    net = ipaddress.ip_network(network)
    return str(net.network_address + 1 + int(unit_hash(provider.seed, cloud_id) * 254))


def test_two_live_hosts_never_share_a_public_ip_but_a_terminated_ones_is_free(settings):
    settings.PORTAL_SIMULATED_API_LATENCY_SECONDS = 0
    provider = SimulatedProvider()
    image = image_rows()[0]["provider_image_ids"][REGION]
    first = provider.launch(a_launch_request(image))
    second = a_launch_request(image)
    wanted = _drawn(provider, second.client_token, "198.51.100.0/24")
    SimulatedHost.objects.filter(cloud_id=first.cloud_id).update(public_ip=wanted)

    launched = provider.launch(second)
    assert launched.public_ip != wanted
    assert ipaddress.ip_address(launched.public_ip) in ipaddress.ip_network("198.51.100.0/24")

    SimulatedHost.objects.filter(cloud_id=first.cloud_id).update(state="terminated")
    third = a_launch_request(image)
    SimulatedHost.objects.filter(cloud_id=first.cloud_id).update(
        public_ip=_drawn(provider, third.client_token, "198.51.100.0/24")
    )
    assert provider.launch(third).public_ip == _drawn(
        provider, third.client_token, "198.51.100.0/24"
    )
