"""The interface every cloud implements, and the errors it may raise."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple


class ProviderError(Exception):
    """Base of the errors a provider raises; ``code`` is the cloud's own error code."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


# The cloud's code for "no capacity for this type here right now" (EC2's, which the simulated
# cloud speaks too): worth another zone, another market, or a later try.
NO_CAPACITY = "InsufficientInstanceCapacity"


class ProviderTransientError(ProviderError):
    """Worth retrying with backoff: throttling, a capacity blip, a network fault."""

    @property
    def outcome_unknown(self) -> bool:
        """The request was sent and its answer never came (botocore's ReadTimeoutError): it may
        have taken effect. Any other transient error is a refusal: nothing happened."""
        return self.code == "ReadTimeoutError"


class ProviderPermanentError(ProviderError):
    """Retrying will not help: a bad image, an unknown type, a refused parameter."""


@dataclass(frozen=True)
class InstanceTypeSpec:
    """What a cloud says about one of its host shapes (no prices: those come from a file)."""

    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    local_nvme_gb: int
    network_gbps: Decimal
    network_burst: bool
    efa: bool
    spot: bool
    regions: tuple[str, ...]
    # EfaInfo's MaximumEfaInterfaces: how many EFA interfaces a host takes (0 without EFA).
    efa_interfaces: int = 0


class GpuValue(NamedTuple):
    """One GPU of a host during one minute, as ``nvidia-smi --query-gpu=index,
    utilization.gpu,memory.used,memory.total`` reports it (stored as this list)."""

    index: int
    utilization: int
    memory_used_mib: int
    memory_total_mib: int


@dataclass(frozen=True)
class GpuSample:
    """One minute of a host's GPUs: mean utilization (percent), memory in use (MiB, all GPUs)
    and, where the cloud knows them, each GPU's own values."""

    utilization: int
    memory_used_mib: int
    gpus: tuple[GpuValue, ...] = ()

    @classmethod
    def of(cls, gpus: Iterable[GpuValue]) -> GpuSample:
        """The host's reading from its GPUs': their mean, rounded, and their memory summed."""
        gpus = tuple(gpus)
        mean = sum(gpu.utilization for gpu in gpus) / len(gpus)
        return cls(round(mean), sum(gpu.memory_used_mib for gpu in gpus), gpus)


@dataclass(frozen=True)
class SpotPriceQuote:
    """One spot price observation: the price in force from ``at``."""

    instance_type: str
    region: str
    availability_zone: str
    price_per_hour: Decimal
    at: datetime


class CloudState:
    """EC2's instance states, which every provider reports in."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"
    GONE = frozenset({SHUTTING_DOWN, TERMINATED})


# Tag keys every cloud resource the portal creates carries (docs/design.md rule 5).
TAG_INSTANCE = "portal:instance"
TAG_PROJECT = "portal:project"
TAG_OWNER = "portal:owner"
# Which portal launched it: reconcile adopts and ends only its own deployment's hosts.
TAG_DEPLOYMENT = "portal:deployment"
# The cluster (its order's id) a node belongs to, and the cluster's placement group and
# security group.
TAG_CLUSTER = "portal:cluster"


def host_name(instance_uuid: str) -> str:
    """A host's name, on its pages and as the cloud's Name tag: portal-<first 8 of its id>."""
    return f"portal-{str(instance_uuid)[:8]}"


@dataclass(frozen=True)
class Isolation:
    """Where a host runs and what guards it: its project's (or the portal's) subnets, security
    groups, the KMS key of its encrypted volume, its tenancy and instance profile. Empty
    fields leave the choice to the cloud (the default VPC and its security group, the account's
    default EBS key, no instance profile)."""

    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    kms_key_id: str = ""
    tenancy: str = "default"
    host_id: str = ""
    instance_profile: str = ""
    # A cluster node's placement group (ClusterLaunch.name); "" for a host on its own.
    placement_group: str = ""


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a launch needs; the same request with the same token is the same host."""

    client_token: str
    instance_uuid: str
    instance_type: str
    image_id: str
    market: str
    ssh_public_key: str
    max_spot_price: Decimal | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The host's telemetry agent credential, for clouds whose hosts post their own readings.
    agent_token: str = ""
    # Environment variables cloud-init sets on the host (the checkpoint location).
    environment: dict[str, str] = field(default_factory=dict)
    # A zone to stay out of: the one whose spot capacity was just taken back (a replacement).
    avoid_zone: str = ""
    # The host runs a managed job: the simulated cloud starts an agent process for it (EC2
    # hosts always run their agent, from cloud-init).
    runs_job: bool = False
    isolation: Isolation = field(default_factory=Isolation)
    # The login that serves the host's JupyterLab through the portal, where it can (EC2 hosts
    # then run the notebook agent; instances/services/notebooks.py notebook_login).
    notebook_user: str = ""
    # A cluster node's EFA interfaces (a replacement launched alone into its cluster).
    efa_interfaces: int = 0
    # The only zone the host may go to ("" any): a cluster's, whose placement group is in one.
    zone: str = ""


@dataclass(frozen=True)
class ClusterLaunch:
    """A cluster's nodes, launched together: one zone, one placement group ("cluster"
    strategy), a security group open between its nodes, all or none. ``nodes`` are the nodes'
    requests in rank order, and the hosts come back in that order. ``client_token`` makes the
    cluster's launch repeatable as a whole (EC2 launches all the nodes in one call under it);
    ``efa_interfaces`` is how many EFA interfaces each node gets (0: none)."""

    cluster_id: str
    client_token: str
    nodes: tuple[LaunchRequest, ...]
    efa_interfaces: int = 0

    @property
    def name(self) -> str:
        return cluster_group_name(self.cluster_id)


def cluster_group_name(cluster_id: str) -> str:
    """A cluster's placement group's and security group's name."""
    return f"portal-cluster-{cluster_id}"


@dataclass(frozen=True)
class CloudHost:
    """A host as the cloud reports it."""

    cloud_id: str
    state: str
    state_changed_at: datetime
    instance_type: str
    market: str
    launched_at: datetime
    tags: dict[str, str] = field(default_factory=dict)
    state_reason: str = ""
    availability_zone: str = ""
    private_ip: str | None = None
    public_ip: str | None = None
    # True when the cloud ended a spot host to take its capacity back.
    spot_interrupted: bool = False
    # The subnet the cloud put it in (of the request's, or the default VPC's).
    subnet_id: str = ""
    # Its place in the launch that made it (EC2's AmiLaunchIndex): a cluster node's rank.
    launch_index: int | None = None

    @property
    def instance_uuid(self) -> str:
        return self.tags.get(TAG_INSTANCE, "")

    @property
    def cluster_id(self) -> str:
        return self.tags.get(TAG_CLUSTER, "")


@dataclass(frozen=True)
class SpotWarning:
    """The cloud saying it will take a spot host back (``interruption``, about two minutes
    ahead, at ``action_at``) or that the risk has risen (``rebalance``)."""

    INTERRUPTION = "interruption"
    REBALANCE = "rebalance"

    cloud_id: str
    kind: str
    at: datetime
    action_at: datetime | None = None


class Provider(abc.ABC):
    """A cloud. Implementations must be safe to call again with the same arguments."""

    name: str
    # GPU telemetry: True when the portal asks the cloud for readings (gpu_readings); False when
    # each host's agent posts its own (instances/agent/portal_agent.py, installed by cloud-init).
    reports_gpu_readings: bool = False

    def gpu_readings(self, minute: datetime) -> dict[str, GpuSample]:
        """Each running host's GPU utilization (percent) and memory in use (MiB) during one
        minute, with each GPU's, by cloud id. Only clouds with ``reports_gpu_readings``
        answer."""
        return {}  # its hosts post their own readings (the agent): nothing to gather here

    @abc.abstractmethod
    def instance_types(self) -> list[InstanceTypeSpec]:
        """The GPU host shapes this cloud offers in the configured region."""

    @abc.abstractmethod
    def spot_prices(
        self, instance_types: Iterable[str], *, since: datetime | None = None
    ) -> list[SpotPriceQuote]:
        """Spot prices for the given types in the configured region, newest included."""

    @abc.abstractmethod
    def images_found(self, image_ids: Iterable[str]) -> set[str]:
        """Which of these machine image ids exist in the configured region (sync_catalog
        leaves the others out, so an order is refused up front instead of failing at launch)."""

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> CloudHost:
        """Launch one host, idempotent by ``request.client_token``."""

    def launch_cluster(self, cluster: ClusterLaunch) -> list[CloudHost]:
        """Launch a cluster's nodes together, all or none, idempotent by its tokens: the hosts
        in the order of ``cluster.nodes`` (rank order)."""
        raise ProviderPermanentError(f"The {self.name} cloud does not launch clusters.")

    def cluster_leftovers(self) -> set[str]:
        """The clusters (ids) that still hold resources of their own in the cloud (EC2: a
        placement group, a security group). A cloud whose clusters hold none has none."""
        return set()

    def release_cluster(self, cluster_id: str) -> bool:
        """Delete what a cluster with no live node still holds in the cloud; True once nothing
        is left, False when the cloud is not ready to let it go yet. Repeatable."""
        return True  # a cloud whose clusters hold nothing of their own has nothing to delete

    @classmethod
    def cluster_endpoint(cls, *, private_ip: str, instance_id: str) -> str:
        """Where a cluster node's TensorFlow worker listens (host:port), as the other nodes
        reach it and TF_CONFIG names it."""
        from django.conf import settings

        return f"{private_ip}:{settings.PORTAL_CLUSTER_PORT}"

    @abc.abstractmethod
    def describe(self, cloud_ids: Iterable[str]) -> dict[str, CloudHost]:
        """The hosts the cloud still knows, by id; unknown ids are simply absent."""

    @abc.abstractmethod
    def find_tagged(self, instance_uuid: str | None = None) -> list[CloudHost]:
        """Hosts that are not terminated and carry the portal's instance tag (optionally one
        instance's): how the provisioner finds work a crashed worker already did."""

    @abc.abstractmethod
    def start(self, cloud_id: str) -> CloudHost:
        """Start a stopped host; starting a running one changes nothing."""

    @abc.abstractmethod
    def stop(self, cloud_id: str) -> CloudHost:
        """Stop a running host; stopping a stopped one changes nothing."""

    @abc.abstractmethod
    def terminate(self, cloud_id: str) -> CloudHost | None:
        """Terminate a host; terminating a terminated or unknown one changes nothing."""

    def spot_warnings(self) -> list[SpotWarning]:
        """Interruption warnings the portal can read from the cloud directly. EC2 has none to
        read here (it sends them through EventBridge to the SQS queue the portal drains)."""
        return []

    @classmethod
    def offers_notebooks(cls) -> bool:
        """JupyterLab on a host, reached through the portal's proxy: only clouds whose hosts
        the portal can start it on and reach offer it (the page offers no button elsewhere).
        The class answers, so a host page's poll asks without building a cloud client."""
        return False

    def notebook_start(
        self,
        cloud_id: str,
        *,
        instance_id: str,
        base_url: str,
        token: str,
        device: str = "",
        kept: tuple = (),
    ) -> str:
        """Start JupyterLab on a running host under ``base_url`` with ``token``: the address
        (host:port) the portal reaches it at. ``device``: a MIG slice's notebook on its shared
        host, in the slice's sandbox (only that device, its own files and ``kept``, its own
        processes), as slice_session_start runs its agent."""
        raise ProviderPermanentError(f"{self.name} hosts do not offer notebooks yet.")

    def notebook_end(self, cloud_id: str, *, instance_id: str) -> None:
        """Stop the host's JupyterLab; a host without one changes nothing."""
        return None  # a cloud that offers no notebooks started none

    @classmethod
    def offers_slice_sessions(cls) -> bool:
        """A MIG slice's own session on its shared host (a job agent that sees only the
        slice's device, files and processes): only clouds whose shared hosts the portal can
        start one on take orders of slices. The class answers, as for notebooks."""
        return False

    def slice_session_start(
        self, cloud_id: str, *, slice_id: str, token: str, device: str, kept: tuple = ()
    ) -> None:
        """Start the agent of slice ``slice_id`` on shared host ``cloud_id``, with ``token`` and
        only ``device`` visible, in a sandbox that shows the slice its own files (and the
        folders ``kept``) and processes only. Safe to ask again: a live one is left alone."""
        raise ProviderPermanentError(f"{self.name} shared hosts do not offer slice sessions yet.")

    @classmethod
    def offers_slice_logins(cls) -> bool:
        """An SSH login of a slice's own on its shared host, forced into the slice's sandbox:
        only clouds whose shared hosts the portal can give one (the page offers none
        elsewhere)."""
        return False

    def slice_login_set(
        self, cloud_id: str, *, slice_id: str, key: str, device: str, kept: tuple = ()
    ) -> str:
        """Let ``key`` (the slice owner's OpenSSH public key) log in to slice ``slice_id`` on
        shared host ``cloud_id``, into the slice's sandbox (as slice_session_start's) and
        nowhere else: the ssh command that logs in. Safe to ask again; slice_session_end ends
        it."""
        raise ProviderPermanentError(f"{self.name} shared hosts do not offer slice logins yet.")

    def slice_session_end(self, *, slice_id: str) -> None:
        """End a slice's session, its login and everything they run; a slice without one
        changes nothing."""
        return None  # a cloud that offers no slice sessions started none


def launch_tags(request: LaunchRequest) -> dict[str, str]:
    """The request's tags plus this deployment's, as every provider stamps them at launch."""
    from django.conf import settings

    return {**request.tags, TAG_DEPLOYMENT: settings.PORTAL_DEPLOYMENT}
