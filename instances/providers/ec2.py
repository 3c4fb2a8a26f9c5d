"""AWS EC2 through boto3. Region, endpoint and the types to offer come from settings."""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.utils import timezone

from instances.lib.agent import USER_DATA_MAX_BYTES, agent_cloud_config
from instances.providers.base import (
    NO_CAPACITY,
    TAG_CLUSTER,
    TAG_DEPLOYMENT,
    TAG_INSTANCE,
    CloudHost,
    CloudState,
    InstanceTypeSpec,
    LaunchRequest,
    Provider,
    ProviderPermanentError,
    ProviderTransientError,
    SpotPriceQuote,
    host_name,
    launch_tags,
)
from instances.providers.ec2_clusters import EC2Clusters
from instances.providers.ec2_errors import translate

log = logging.getLogger(__name__)

_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) GMT\)")
SPOT_INTERRUPTION_CODES = {
    "Server.SpotInstanceTermination",
    "Server.SpotInstanceShutdown",
}
_NETWORK = re.compile(r"(?P<burst>up to )?(?P<gbps>[\d.]+) gigabit", re.IGNORECASE)


def fitted(user_data: str) -> str | bytes:
    """User data as EC2 takes it (16 KB at most): the cloud-config as text, or gzipped when it
    is longer (a large cluster's table of node credentials), which cloud-init unpacks. No
    timestamp in the gzip header: a retried launch must send the very same bytes under its
    ClientToken."""
    raw = user_data.encode()
    if len(raw) <= USER_DATA_MAX_BYTES:
        return user_data
    packed = gzip.compress(raw, mtime=0)
    if len(packed) > USER_DATA_MAX_BYTES:
        raise ProviderPermanentError(
            f"The host's user data is {len(packed)} bytes gzipped, over EC2's "
            f"{USER_DATA_MAX_BYTES}.",
            code="InvalidParameterValue",
        )
    return packed


class EC2Provider(EC2Clusters, Provider):
    name = "ec2"

    def __init__(self) -> None:
        self.region = settings.PORTAL_REGION
        self.client = boto3.client(
            "ec2",
            region_name=self.region,
            endpoint_url=settings.AWS_ENDPOINT_URL or None,
            # Adaptive mode backs off on throttling client-side (RunInstances is a token bucket).
            config=Config(retries={"mode": "adaptive", "max_attempts": 8}),
        )
        self._zones: dict[str, str] = {}  # subnet -> its availability zone
        self._vpcs: dict[str, str] = {}  # subnet -> its VPC

    def _describe_types(self, names: list[str]) -> list[dict]:
        try:
            pages = self.client.get_paginator("describe_instance_types").paginate(
                InstanceTypes=names
            )
            return [item for page in pages for item in page["InstanceTypes"]]
        except ClientError as error:
            if error.response["Error"]["Code"] != "InvalidInstanceType" or len(names) == 1:
                raise translate(error) from error
        # One unknown name fails the whole call: ask one by one and skip the unknown ones.
        found = []
        for name in names:
            try:
                found.extend(self._describe_types([name]))
            except ProviderPermanentError as error:
                log.warning("EC2 does not offer %s in %s: %s", name, self.region, error)
        return found

    def instance_types(self) -> list[InstanceTypeSpec]:
        specs = []
        for item in self._describe_types(list(settings.AWS_EC2_INSTANCE_TYPES)):
            gpus = item.get("GpuInfo", {}).get("Gpus", [])
            if not gpus:
                continue
            gpu = gpus[0]
            network = _NETWORK.search(item.get("NetworkInfo", {}).get("NetworkPerformance", ""))
            specs.append(
                InstanceTypeSpec(
                    name=item["InstanceType"],
                    gpu_model=gpu["Name"],
                    gpu_count=sum(g["Count"] for g in gpus),
                    gpu_memory_gib=round(gpu["MemoryInfo"]["SizeInMiB"] / 1024),
                    vcpus=item["VCpuInfo"]["DefaultVCpus"],
                    memory_gib=round(item["MemoryInfo"]["SizeInMiB"] / 1024),
                    local_nvme_gb=item.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0),
                    network_gbps=Decimal(network["gbps"]) if network else Decimal(0),
                    network_burst=bool(network and network["burst"]),
                    efa=bool(item.get("NetworkInfo", {}).get("EfaSupported")),
                    spot="spot" in item.get("SupportedUsageClasses", []),
                    regions=(self.region,),
                    efa_interfaces=item.get("NetworkInfo", {})
                    .get("EfaInfo", {})
                    .get("MaximumEfaInterfaces", 0),
                )
            )
        return specs

    def spot_prices(
        self, instance_types: Iterable[str], *, since: datetime | None = None
    ) -> list[SpotPriceQuote]:
        names = list(instance_types)
        if not names:
            return []
        now = timezone.now()
        try:
            pages = self.client.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=names,
                ProductDescriptions=["Linux/UNIX"],
                StartTime=since or now - timedelta(hours=1),
                EndTime=now,
            )
            rows = [row for page in pages for row in page["SpotPriceHistory"]]
        except (ClientError, BotoCoreError) as error:
            raise translate(error) from error
        return [
            SpotPriceQuote(
                instance_type=row["InstanceType"],
                region=self.region,
                availability_zone=row.get("AvailabilityZone", ""),
                price_per_hour=Decimal(row["SpotPrice"]),
                at=row["Timestamp"],
            )
            for row in rows
        ]

    # --- hosts -------------------------------------------------------------------------------

    def _call(self, operation: str, **params):
        try:
            return getattr(self.client, operation)(**params)
        except (ClientError, BotoCoreError) as error:
            raise translate(error) from error

    def _root_device(self, image_id: str) -> str:
        images = self._call("describe_images", ImageIds=[image_id])["Images"]
        if not images:
            raise ProviderPermanentError(
                f"The image id '{image_id}' does not exist", code="InvalidAMIID.NotFound"
            )
        return images[0].get("RootDeviceName", "/dev/sda1")

    def images_found(self, image_ids: Iterable[str]) -> set[str]:
        wanted = sorted(set(image_ids))
        if not wanted:
            return set()
        # A filter, not ImageIds=: one unknown id in ImageIds fails the whole call.
        pages = self.client.get_paginator("describe_images").paginate(
            Filters=[{"Name": "image-id", "Values": wanted}]
        )
        try:
            return {image["ImageId"] for page in pages for image in page["Images"]}
        except (ClientError, BotoCoreError) as error:
            raise translate(error) from error

    def launch(self, request: LaunchRequest) -> CloudHost:
        params = self._launch_params(
            request,
            user_data=self._user_data(request),
            tags=launch_tags(request),
            name=host_name(request.instance_uuid),
            token=request.client_token,
        )
        if request.tags.get(TAG_CLUSTER):
            items = self._join_cluster(request, params)
        else:
            items = self._run(
                params,
                request,
                place=lambda subnet: {"SubnetId": subnet},
                earlier=lambda error: [self._launched_earlier(request, error)],
            )
        return items[0] if isinstance(items[0], CloudHost) else self._host(items[0])

    def _user_data(self, request: LaunchRequest, *, nodes: tuple[tuple[str, str], ...] = ()) -> str:
        """The host's cloud-config: the researcher's key, the agents (every node's credential,
        for a cluster's hosts, which share one user data) and the environment."""
        # cloud-init installs the researcher's key: no EC2 key pair per user to manage.
        # JSON strings are YAML strings: a key comment such as "alice: x #y" stays one string.
        key = json.dumps(request.ssh_public_key)
        user_data = f"#cloud-config\nssh_authorized_keys:\n  - {key}\n"
        environment = ""
        if request.environment:
            # For every login and service on the host (the checkpoint location, unchanged for
            # a replacement, so the work resumes where it stopped).
            lines = "".join(
                f"{k}={json.dumps(v)}\n" for k, v in sorted(request.environment.items())
            )
            environment = (
                f"  - path: /etc/environment\n    append: true\n    content: {json.dumps(lines)}\n"
            )
        if request.agent_token:
            user_data += agent_cloud_config(
                portal_url=settings.PORTAL_AGENT_URL,
                instance_id=request.instance_uuid,
                token=request.agent_token,
                extra_files=environment,
                notebook_user=request.notebook_user,
                nodes=nodes,
            )
        elif environment:
            user_data += "write_files:\n" + environment
        return user_data

    def _launch_params(
        self,
        request: LaunchRequest,
        *,
        user_data: str,
        tags: dict[str, str],
        name: str,
        token: str,
    ) -> dict:
        """RunInstances' parameters for one host of ``request`` (a cluster asks for more)."""
        tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        tag_list.append({"Key": "Name", "Value": name})
        ebs = {
            "VolumeSize": settings.PORTAL_EC2_ROOT_VOLUME_GB,
            "VolumeType": "gp3",
            "Encrypted": True,
            "DeleteOnTermination": True,
        }
        isolation = request.isolation
        if isolation.kms_key_id:
            ebs["KmsKeyId"] = isolation.kms_key_id
        params = {
            "ClientToken": token,
            "ImageId": request.image_id,
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            # botocore base64-encodes UserData for RunInstances itself; encoding it here too
            # would hand cloud-init base64 text instead of a cloud-config.
            "UserData": fitted(user_data),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "BlockDeviceMappings": [
                {"DeviceName": self._root_device(request.image_id), "Ebs": ebs}
            ],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if isolation.security_group_ids:
            params["SecurityGroupIds"] = list(isolation.security_group_ids)
        if isolation.instance_profile:
            key = "Arn" if isolation.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: isolation.instance_profile}
        if isolation.tenancy == "host":
            params["Placement"] = {"Tenancy": "host", "HostId": isolation.host_id}
        elif isolation.tenancy == "dedicated":
            params["Placement"] = {"Tenancy": "dedicated"}
        if request.market == "spot":
            spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if request.max_spot_price is not None:
                spot["MaxPrice"] = str(request.max_spot_price)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return params

    def _run(self, params: dict, request: LaunchRequest, *, place, earlier) -> list:
        """RunInstances in the request's subnets in turn (``place``: a subnet's parameters),
        the zone to avoid last, until one has capacity: the reservation's instances. A token
        that took effect in an earlier subnet (its reply lost) answers ``earlier(error)``."""
        subnets = self._subnets_to_try(request)
        if not subnets:
            return self._call("run_instances", **params)["Instances"]
        shortage: ProviderTransientError | None = None
        for subnet in subnets:
            try:
                reply = self._call("run_instances", **params, **place(subnet))
            except ProviderTransientError as error:
                if error.code != NO_CAPACITY:
                    raise
                # No capacity in this zone; the next subnet is in another one. The same
                # ClientToken is safe to reuse: a refused launch did not consume it.
                shortage = error
                continue
            except ProviderPermanentError as error:
                if error.code != "IdempotentParameterMismatch":
                    raise
                # An earlier try with this token took effect in another subnet (its reply was
                # lost): those hosts are the answer, found by their tags.
                return earlier(error)
            return reply["Instances"]
        raise ProviderTransientError(
            f"{NO_CAPACITY}: no capacity for {request.instance_type} in any of the zones "
            f"{', '.join(self._zones[s] for s in subnets)}: {shortage}",
            code=NO_CAPACITY,
        )

    def _subnets_to_try(self, request: LaunchRequest) -> list[str]:
        """The request's subnets (one per zone) in order, the zone to avoid last; only those of
        the request's zone when it names one (a cluster's replacement)."""
        subnets, avoid_zone = list(request.isolation.subnet_ids), request.avoid_zone
        unknown = [subnet for subnet in subnets if subnet not in self._zones]
        if unknown:
            # A subnet's zone never changes: each is asked once per process.
            reply = self._call("describe_subnets", SubnetIds=unknown)
            self._zones |= {row["SubnetId"]: row["AvailabilityZone"] for row in reply["Subnets"]}
            self._vpcs |= {row["SubnetId"]: row.get("VpcId", "") for row in reply["Subnets"]}
        if request.zone:
            # A cluster's replacement: only its placement group's zone will take it.
            subnets = [subnet for subnet in subnets if self._zones.get(subnet) == request.zone]
            if not subnets and request.isolation.subnet_ids:
                raise ProviderPermanentError(
                    f"None of the project's subnets is in {request.zone}, where the host's "
                    "cluster runs.",
                    code="InvalidSubnet",
                )
        return sorted(subnets, key=lambda subnet: self._zones.get(subnet) == avoid_zone)

    def _launched_earlier(self, request: LaunchRequest, error: Exception) -> CloudHost:
        found = self.find_tagged(request.instance_uuid)
        if not found:
            # Not visible yet (EC2 reads are eventually consistent): worth asking again.
            raise ProviderTransientError(str(error), code="IdempotentParameterMismatch")
        return found[0]

    def _host(self, item: dict) -> CloudHost:
        state = item["State"]["Name"]
        reason = item.get("StateTransitionReason", "")
        code = item.get("StateReason", {}).get("Code", "")
        launched = item["LaunchTime"]
        changed = launched
        found = _REASON_TIME.search(reason)
        if found:
            changed = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        elif state != CloudState.RUNNING:
            changed = timezone.now()
        return CloudHost(
            cloud_id=item["InstanceId"],
            state=state,
            state_changed_at=changed,
            instance_type=item["InstanceType"],
            market="spot" if item.get("InstanceLifecycle") == "spot" else "on_demand",
            launched_at=launched,
            tags={tag["Key"]: tag["Value"] for tag in item.get("Tags", [])},
            state_reason=code or reason,
            availability_zone=item.get("Placement", {}).get("AvailabilityZone", ""),
            private_ip=item.get("PrivateIpAddress"),
            public_ip=item.get("PublicIpAddress"),
            spot_interrupted=code in SPOT_INTERRUPTION_CODES,
            subnet_id=item.get("SubnetId", ""),
            launch_index=item.get("AmiLaunchIndex"),
        )

    def _instances(self, filters: list[dict]) -> list[CloudHost]:
        try:
            pages = self.client.get_paginator("describe_instances").paginate(Filters=filters)
            return [
                self._host(item)
                for page in pages
                for reservation in page["Reservations"]
                for item in reservation["Instances"]
            ]
        except (ClientError, BotoCoreError) as error:
            raise translate(error) from error

    def describe(self, cloud_ids: Iterable[str]) -> dict[str, CloudHost]:
        ids = list(cloud_ids)
        if not ids:
            return {}
        # A filter (unlike InstanceIds=) leaves unknown ids out instead of failing the call.
        hosts = self._instances([{"Name": "instance-id", "Values": ids}])
        return {host.cloud_id: host for host in hosts}

    def find_tagged(self, instance_uuid: str | None = None) -> list[CloudHost]:
        live = [CloudState.PENDING, CloudState.RUNNING, CloudState.STOPPING, CloudState.STOPPED]
        tag_filter = (
            {"Name": f"tag:{TAG_INSTANCE}", "Values": [instance_uuid]}
            if instance_uuid
            # A cluster's hosts carry their node's tag from just after their launch: one
            # that lost its worker in between is known by its cluster's tag until reconcile
            # (cluster_node_ids) tells whose it is.
            else {"Name": "tag-key", "Values": [TAG_INSTANCE, TAG_CLUSTER]}
        )
        deployment = {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [settings.PORTAL_DEPLOYMENT]}
        return self._instances(
            [tag_filter, deployment, {"Name": "instance-state-name", "Values": live}]
        )

    def _one(self, cloud_id: str) -> CloudHost:
        found = self.describe([cloud_id]).get(cloud_id)
        if found is None:
            raise ProviderPermanentError(
                f"The instance ID '{cloud_id}' does not exist", code="InvalidInstanceID.NotFound"
            )
        return found

    def start(self, cloud_id: str) -> CloudHost:
        host = self._one(cloud_id)
        if host.state in CloudState.GONE:
            # moto starts terminated hosts; EC2 refuses, and so does the portal.
            raise ProviderPermanentError(
                f"The instance '{cloud_id}' is not in a state from which it can be started.",
                code="IncorrectInstanceState",
            )
        if host.state in (CloudState.STOPPED, CloudState.STOPPING):
            self._call("start_instances", InstanceIds=[cloud_id])
        return self._one(cloud_id)

    def stop(self, cloud_id: str) -> CloudHost:
        host = self._one(cloud_id)
        if host.state in (CloudState.RUNNING, CloudState.PENDING):
            self._call("stop_instances", InstanceIds=[cloud_id])
        return self._one(cloud_id)

    def terminate(self, cloud_id: str) -> CloudHost | None:
        try:
            self.client.terminate_instances(InstanceIds=[cloud_id])
        except ClientError as error:
            if error.response["Error"]["Code"] == "InvalidInstanceID.NotFound":
                return None
            raise translate(error) from error
        except BotoCoreError as error:
            raise translate(error) from error
        return self.describe([cloud_id]).get(cloud_id)

    @classmethod
    def offers_notebooks(cls) -> bool:
        """When the deployer says the portal reaches its hosts (PORTAL_EC2_NOTEBOOKS): then each
        host of an image with JupyterLab runs the notebook agent (instances/lib/agent.py)."""
        return settings.PORTAL_EC2_NOTEBOOKS

    def notebook_start(self, cloud_id: str, *, instance_id: str, base_url: str, token: str) -> str:
        """The host's agent starts JupyterLab itself: it asks the portal what to serve every few
        seconds and finds this notebook open (the worker then waits until it answers). The
        address is the host's private one: the portal runs in the hosts' VPC."""
        if not self.offers_notebooks():
            raise ProviderPermanentError("EC2 hosts serve no notebooks: PORTAL_EC2_NOTEBOOKS=0.")
        host = self._one(cloud_id)
        if not host.private_ip:
            raise ProviderPermanentError(f"{cloud_id} has no private address to reach.")
        return f"{host.private_ip}:{settings.PORTAL_NOTEBOOK_PORT}"

    def notebook_end(self, cloud_id: str, *, instance_id: str) -> None:
        """Nothing to ask the cloud: with the notebook ended, the host's agent finds none open
        at its next question and stops the server, kernels and all."""
        return None
