"""A cloud simulated inside the portal's database, so web and worker processes share it.

Deterministic when seeded (``PORTAL_SIMULATED_SEED``): the same seed and clock give the same
spot prices, boot delays and interruptions, and the n-th host call of a process meets the same
faults (see ``Faults``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from instances.data import DATA_DIR, image_rows, simulated_cloud_rows
from instances.models import Image, SimulatedHost
from instances.providers.base import (
    NO_CAPACITY,
    TAG_DEPLOYMENT,
    TAG_INSTANCE,
    CloudHost,
    CloudState,
    InstanceTypeSpec,
    LaunchRequest,
    Provider,
    ProviderPermanentError,
    ProviderTransientError,
    launch_tags,
)
from instances.providers.faults import FAULT_DICE, Faults, unit_hash
from instances.providers.gpu_profile import SimulatedGpus
from instances.providers.simulated_agents import HostNotebooks, host_agents
from instances.providers.simulated_clusters import SimulatedClusters
from instances.providers.simulated_logins import SliceLogins
from instances.providers.simulated_market import SPOT_INTERRUPTION_REASON, SpotMarket

log = logging.getLogger(__name__)


class SimulatedProvider(
    SimulatedClusters, SimulatedGpus, SliceLogins, HostNotebooks, SpotMarket, Provider
):
    name = "simulated"
    reports_gpu_readings = True

    def __init__(self) -> None:
        self.region = settings.PORTAL_REGION
        self.seed = settings.PORTAL_SIMULATED_SEED
        self.boot = timedelta(seconds=settings.PORTAL_SIMULATED_BOOT_SECONDS)
        self.latency = settings.PORTAL_SIMULATED_API_LATENCY_SECONDS
        self.interruptions_per_hour = settings.PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR
        self.warning_lead = timedelta(seconds=settings.PORTAL_SPOT_WARNING_LEAD_SECONDS)
        self.faults = Faults.from_settings()
        # Whether a job host gets an agent process (the demo's played past has none).
        self.agents = settings.PORTAL_SIMULATED_AGENTS

    def _rows(self) -> list[dict]:
        return simulated_cloud_rows()

    def _known_images(self) -> set[str]:
        """The ids in this region of the shipped images file, of PORTAL_IMAGE_FILE and those an
        admin set on an image: this cloud has those images and no other."""
        rows = [*image_rows(DATA_DIR / "images.json"), *image_rows()]
        known = {row["provider_image_ids"].get(self.region) for row in rows}
        for overrides in Image.objects.values_list("image_id_overrides", flat=True):
            known.add(overrides.get(self.region))
        known.discard(None)
        return known

    def images_found(self, image_ids: Iterable[str]) -> set[str]:
        return set(image_ids) & self._known_images()

    def instance_types(self) -> list[InstanceTypeSpec]:
        return [
            InstanceTypeSpec(
                name=row["name"],
                gpu_model=row["gpu_model"],
                gpu_count=row["gpu_count"],
                gpu_memory_gib=row["gpu_memory_gib"],
                vcpus=row["vcpus"],
                memory_gib=row["memory_gib"],
                local_nvme_gb=row["local_nvme_gb"],
                network_gbps=Decimal(row["network_gbps"]),
                network_burst=row["network_burst"],
                efa=row["efa"],
                spot=row["spot"],
                regions=tuple(row["regions"]),
                efa_interfaces=row.get("efa_interfaces", 0),
            )
            for row in self._rows()
            if self.region in row["regions"]
        ]

    # --- hosts -------------------------------------------------------------------------------

    def _call(self) -> bool:
        """The way into every host call: the request's latency, then a throttling burst may
        refuse it before it does anything. True when this call's reply will be lost."""
        if self.latency:
            time.sleep(self.latency)
        if not self.faults.rolled:
            return False
        throttled, lost = FAULT_DICE.roll(self.seed, self.faults)
        if throttled:
            log.info("simulated cloud fault: call throttled (RequestLimitExceeded)")
            raise ProviderTransientError("Request limit exceeded.", code="RequestLimitExceeded")
        return lost

    def _reply(self, lost: bool, result):
        """The way out of every host call, after the cloud acted: a slow reply, or none at all
        (the caller sees a timeout, as botocore's ReadTimeoutError, though the call took effect)."""
        if self.faults.reply_latency:
            time.sleep(self.faults.reply_latency)
        if lost:
            log.info("simulated cloud fault: reply lost after the call took effect")
            raise ProviderTransientError(
                f'Read timeout on endpoint URL: "https://ec2.{self.region}.amazonaws.com/"',
                code="ReadTimeoutError",
            )
        return result

    @staticmethod
    def _digest(request: LaunchRequest) -> str:
        params = {
            "instance_type": request.instance_type,
            "image_id": request.image_id,
            "market": request.market,
            "max_spot_price": str(request.max_spot_price or ""),
            "ssh_public_key": request.ssh_public_key,
            "tags": request.tags,
            "environment": request.environment,
            "isolation": asdict(request.isolation),
        }
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()

    def _address(self, network: str, field: str, cloud_id: str) -> str:
        """The address the seed draws for this host, or the next one no live host holds (a
        cloud never gives two live hosts one address; a /24 drawn at random would by its 20th
        host, half the time). The table's constraint settles two launches at once."""
        net = ipaddress.ip_network(network)
        usable = net.num_addresses - 2
        start = int(unit_hash(self.seed, cloud_id) * usable)
        taken = set(
            SimulatedHost.objects.exclude(state=SimulatedHost.State.TERMINATED).values_list(
                field, flat=True
            )
        )
        for step in range(usable):
            address = str(net.network_address + 1 + (start + step) % usable)
            if address not in taken:
                return address
        raise ProviderTransientError(
            f"There are not enough free addresses in {network} for this launch.",
            code="InsufficientFreeAddressesInSubnet",
        )

    def _settle(self, host: SimulatedHost) -> SimulatedHost:
        """Advance a host whose moving state has run its course, at the time it settled."""
        now = timezone.now()
        changes: dict = {}
        if host.settles_at and host.settles_at <= now:
            settled = {
                SimulatedHost.State.PENDING: SimulatedHost.State.RUNNING,
                SimulatedHost.State.STOPPING: SimulatedHost.State.STOPPED,
                SimulatedHost.State.SHUTTING_DOWN: SimulatedHost.State.TERMINATED,
            }.get(host.state)
            if settled:
                changes = {
                    "state": settled,
                    "state_changed_at": host.settles_at,
                    "settles_at": None,
                }
        state = changes.get("state", host.state)
        if state == SimulatedHost.State.RUNNING and host.interrupt_at is None:
            probe = SimulatedHost(
                cloud_id=host.cloud_id,
                market=host.market,
                state_changed_at=changes.get("state_changed_at", host.state_changed_at),
            )
            decided = self._interrupted_at(probe, now)
            if decided:
                if changes:
                    SimulatedHost.objects.filter(pk=host.pk, state=host.state).update(**changes)
                    host.refresh_from_db()
                    changes = {}
                self._warn(host, decided)
        if state == SimulatedHost.State.RUNNING and host.interrupt_at and host.interrupt_at <= now:
            changes = {
                "state": SimulatedHost.State.TERMINATED,
                "state_changed_at": host.interrupt_at,
                "state_reason": SPOT_INTERRUPTION_REASON,
                "settles_at": None,
            }
        if changes:
            # Conditional: two processes settling the same host apply the change once.
            SimulatedHost.objects.filter(pk=host.pk, state=host.state).update(**changes)
            host.refresh_from_db()
            self._agent_stops(host)
        return host

    @staticmethod
    def _host(row: SimulatedHost) -> CloudHost:
        return CloudHost(
            cloud_id=row.cloud_id,
            state=row.state,
            state_changed_at=row.state_changed_at,
            instance_type=row.instance_type,
            market=row.market,
            launched_at=row.launched_at,
            tags=dict(row.tags),
            state_reason=row.state_reason,
            availability_zone=row.availability_zone,
            private_ip=row.private_ip,
            public_ip=row.public_ip if row.state != SimulatedHost.State.TERMINATED else None,
            spot_interrupted=row.state_reason == SPOT_INTERRUPTION_REASON,
            subnet_id=row.isolation.get("subnet_id", ""),
        )

    def launch(self, request: LaunchRequest) -> CloudHost:
        lost = self._call()
        return self._reply(lost, self._launch(request))

    def _launch(self, request: LaunchRequest) -> CloudHost:
        request = replace(request, tags=launch_tags(request))
        digest = self._digest(request)
        honour = not self.faults.ignore_client_tokens
        if honour:
            existing = SimulatedHost.objects.filter(client_token=request.client_token).first()
            if existing is not None:
                return self._same_token(existing, digest)
        self._capacity_for(request, hosts=1)
        for _ in range(8):
            key = request.client_token if honour else self._unused_key(request.client_token)
            try:
                return self._host(self._create(request, key=key, digest=digest))
            except IntegrityError:
                existing = SimulatedHost.objects.filter(client_token=request.client_token).first()
                if honour and existing is not None:
                    # Another call with the same token won the race: answer as EC2 does, with
                    # its host.
                    return self._same_token(existing, digest)
                # A concurrent launch took this key (under the same ignored token) or one of
                # the addresses drawn: the next try draws again.
        raise ProviderTransientError(
            "The launch collided with others; try again.", code="InternalError"
        )

    def _capacity_for(self, request: LaunchRequest, *, hosts: int) -> None:
        """Refuse, as EC2 does, a launch of ``hosts`` hosts this cloud cannot make now: a type
        or image it lacks, a spot price above the request's maximum, too little capacity."""
        offer = {row["name"]: row for row in self._rows()}.get(request.instance_type)
        if offer is None or self.region not in offer["regions"]:
            raise ProviderPermanentError(
                f"The instance type {request.instance_type} is not offered in {self.region}.",
                code="Unsupported",
            )
        if request.image_id not in self._known_images():
            raise ProviderPermanentError(
                f"The image id '{request.image_id}' does not exist in {self.region}.",
                code="InvalidAMIID.NotFound",
            )
        if request.market == "spot":
            if not offer["spot"]:
                raise ProviderPermanentError(
                    f"Spot is not offered for {request.instance_type}.", code="Unsupported"
                )
            price = self._spot_price_now(request.instance_type)
            if request.max_spot_price is not None and price and request.max_spot_price < price:
                raise ProviderPermanentError(
                    f"Your max price {request.max_spot_price} is below the spot price {price}.",
                    code="SpotMaxPriceTooLow",
                )
        live = (
            SimulatedHost.objects.filter(instance_type=request.instance_type)
            .exclude(state=SimulatedHost.State.TERMINATED)
            .count()
        )
        if live + hosts > offer["capacity"]:
            raise ProviderTransientError(
                f"We currently do not have sufficient {request.instance_type} capacity.",
                code=NO_CAPACITY,
            )

    @staticmethod
    def _unused_key(token: str) -> str:
        """The cloud's key for one more host under a token it does not honour: the token itself
        the first time, then numbered (the key is unique, like the cloud id made from it)."""
        prefix = f"{token[:48]}~"
        launched = SimulatedHost.objects.filter(
            Q(client_token=token) | Q(client_token__startswith=prefix)
        ).count()
        return token if not launched else f"{prefix}{launched}"

    def _create(self, request: LaunchRequest, *, key: str, digest: str) -> SimulatedHost:
        row = self._insert(request, key=key, digest=digest)
        if request.runs_job and self.agents:
            # The host's agent: a process of its own on this machine, which asks the portal
            # for the job once the host runs and runs its command here.
            transaction.on_commit(
                lambda: host_agents().ensure(
                    request.instance_uuid,
                    url=settings.PORTAL_AGENT_URL,
                    token=request.agent_token,
                )
            )
        return row

    def _insert(self, request: LaunchRequest, *, key: str, digest: str) -> SimulatedHost:
        now = timezone.now()
        checkpoint = request.environment.get("PORTAL_CHECKPOINT_URI", "")
        if checkpoint.startswith("file://"):
            # The simulated cloud's durable storage is a local folder the host "mounts".
            Path(checkpoint.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        cloud_id = "i-" + hashlib.sha256(key.encode()).hexdigest()[:17]
        settles = now + self.boot if self.boot else None
        with transaction.atomic():
            return SimulatedHost.objects.create(
                cloud_id=cloud_id,
                client_token=key,
                params_digest=digest,
                portal_instance=request.tags.get(TAG_INSTANCE, ""),
                tags=request.tags,
                instance_type=request.instance_type,
                image_id=request.image_id,
                market=request.market,
                max_spot_price=request.max_spot_price,
                region=self.region,
                availability_zone=self._zone(request),
                environment=request.environment,
                isolation=self._isolation(request),
                private_ip=self._address("10.20.0.0/16", "private_ip", cloud_id),
                public_ip=self._address("198.51.100.0/24", "public_ip", cloud_id),
                state=SimulatedHost.State.PENDING if settles else SimulatedHost.State.RUNNING,
                state_changed_at=now,
                settles_at=settles,
                launched_at=now,
            )

    def _isolation(self, request: LaunchRequest) -> dict:
        """The request's isolation as EC2 records it, with the one subnet the host went to (the
        first, or the second for a replacement that stays out of zone a)."""
        values = asdict(request.isolation)
        subnets = values.pop("subnet_ids")
        if not values["placement_group"]:
            del values["placement_group"]
        in_b = request.avoid_zone == f"{self.region}a" or request.zone == f"{self.region}b"
        avoiding = in_b and len(subnets) > 1
        subnet = subnets[1] if avoiding else (subnets[0] if subnets else "")
        return values | {
            "subnet_id": subnet,
            "security_group_ids": list(values["security_group_ids"]),
        }

    def _zone(self, request: LaunchRequest) -> str:
        """Zone a of the region, or zone b for a replacement that stays out of zone a; the one
        zone a cluster's replacement must go to."""
        if request.zone:
            return request.zone
        first = f"{self.region}a"
        return f"{self.region}b" if request.avoid_zone == first else first

    def _same_token(self, existing: SimulatedHost, digest: str) -> CloudHost:
        if existing.params_digest != digest:
            raise ProviderPermanentError(
                "The client token was already used with other parameters.",
                code="IdempotentParameterMismatch",
            )
        return self._host(self._settle(existing))

    def describe(self, cloud_ids: Iterable[str]) -> dict[str, CloudHost]:
        self._call()  # a read: a lost reply is only a slow one
        rows = SimulatedHost.objects.filter(cloud_id__in=list(cloud_ids))
        return self._reply(False, {row.cloud_id: self._host(self._settle(row)) for row in rows})

    def find_tagged(self, instance_uuid: str | None = None) -> list[CloudHost]:
        self._call()
        # Live as EC2's find_tagged filters it: a host shutting down is already gone, and the
        # provisioner must launch a new one rather than adopt it.
        rows = (
            SimulatedHost.objects.exclude(portal_instance="")
            .exclude(state__in=CloudState.GONE)
            # Only this deployment's hosts, as EC2's filter on the portal:deployment tag.
            .filter(**{f"tags__{TAG_DEPLOYMENT}": settings.PORTAL_DEPLOYMENT})
        )
        if instance_uuid is not None:
            rows = rows.filter(portal_instance=instance_uuid)
        hosts = [self._host(self._settle(row)) for row in rows]
        return self._reply(False, [host for host in hosts if host.state not in CloudState.GONE])

    def _get(self, cloud_id: str) -> SimulatedHost:
        row = SimulatedHost.objects.filter(cloud_id=cloud_id).first()
        if row is None:
            raise ProviderPermanentError(
                f"The instance ID '{cloud_id}' does not exist", code="InvalidInstanceID.NotFound"
            )
        return self._settle(row)

    def _move(
        self, row: SimulatedHost, moving: str, settled: str, delay: timedelta
    ) -> SimulatedHost:
        """Enter a moving state that settles after ``delay`` (at once when there is none)."""
        now = timezone.now()
        settles = now + delay if delay else None
        SimulatedHost.objects.filter(pk=row.pk, state=row.state).update(
            state=moving if settles else settled,
            state_changed_at=now,
            settles_at=settles,
            state_reason="",
        )
        row = SimulatedHost.objects.get(pk=row.pk)
        self._agent_stops(row)
        return self._settle(row)

    @staticmethod
    def _refuse_if_gone(row: SimulatedHost, verb: str) -> None:
        if row.state in (SimulatedHost.State.TERMINATED, SimulatedHost.State.SHUTTING_DOWN):
            raise ProviderPermanentError(
                f"The instance '{row.cloud_id}' is not in a state from which it can be {verb}.",
                code="IncorrectInstanceState",
            )

    def start(self, cloud_id: str) -> CloudHost:
        lost = self._call()
        return self._reply(lost, self._start(cloud_id))

    def _start(self, cloud_id: str) -> CloudHost:
        row = self._get(cloud_id)
        self._refuse_if_gone(row, "started")
        if row.state == SimulatedHost.State.STOPPED:
            row = self._move(
                row, SimulatedHost.State.PENDING, SimulatedHost.State.RUNNING, self.boot
            )
        return self._host(row)

    def stop(self, cloud_id: str) -> CloudHost:
        lost = self._call()
        return self._reply(lost, self._stop(cloud_id))

    def _stop(self, cloud_id: str) -> CloudHost:
        row = self._get(cloud_id)
        if row.market == "spot":
            raise ProviderPermanentError(
                "A one-time Spot Instance cannot be stopped; terminate it instead.",
                code="UnsupportedOperation",
            )
        self._refuse_if_gone(row, "stopped")
        if row.state in (SimulatedHost.State.RUNNING, SimulatedHost.State.PENDING):
            row = self._move(
                row, SimulatedHost.State.STOPPING, SimulatedHost.State.STOPPED, self.boot / 2
            )
        return self._host(row)

    def terminate(self, cloud_id: str) -> CloudHost | None:
        lost = self._call()
        return self._reply(lost, self._terminate(cloud_id))

    def _terminate(self, cloud_id: str) -> CloudHost | None:
        row = SimulatedHost.objects.filter(cloud_id=cloud_id).first()
        if row is None:
            return None
        row = self._settle(row)
        if row.state not in (SimulatedHost.State.TERMINATED, SimulatedHost.State.SHUTTING_DOWN):
            row = self._move(
                row,
                SimulatedHost.State.SHUTTING_DOWN,
                SimulatedHost.State.TERMINATED,
                self.boot / 4,
            )
        return self._host(row)
