"""The instances app's tables, one module per topic: catalog (instance types, images), orders,
hosts (Instance, its events and the ACTIONS table), pools, telemetry (GPU readings, agent
credentials), leases (lease warnings sent), quotas (quotas, their history, requests for more),
approvals (approval policies), idle (idle policies), jobs (managed jobs, their runs, events
and logs), mig (MIG slice profiles) and simulated (the simulated cloud's own table);
fields holds the field shapes they share. Import them from here."""

from instances.models.approvals import ApprovalPolicy
from instances.models.catalog import (
    SPOT_PRICE_FLOOR_SHARE,
    SPOT_PRICE_STALE_AFTER,
    Image,
    InstanceType,
    InstanceTypeQuerySet,
    validate_image_ids,
)
from instances.models.hosts import (
    ACTIONS,
    TASK_OF_STATUS,
    Instance,
    InstanceAction,
    InstanceEvent,
    InstanceQuerySet,
)
from instances.models.idle import IdlePolicy
from instances.models.jobs import (
    Job,
    JobEvent,
    JobLogChunk,
    JobMarket,
    JobRun,
    JobScalar,
    JobWorkdir,
)
from instances.models.leases import LeaseNotice
from instances.models.mig import (
    COMPUTE_SLICES,
    MigProfile,
    MigSlot,
    gpu_equivalents,
    gpus_in_words,
    gpus_number,
)
from instances.models.notebooks import Notebook
from instances.models.orders import (
    InterruptionPolicy,
    Market,
    Order,
    OrderEvent,
    Placement,
    ProjectScopedQuerySet,
)
from instances.models.pools import Pool, PoolEvent, PoolQuerySet, PoolSample, PoolSchedule
from instances.models.quotas import (
    Quota,
    QuotaChange,
    QuotaLimit,
    QuotaRequest,
    QuotaRequestQuerySet,
)
from instances.models.simulated import SimulatedHost
from instances.models.telemetry import GpuHourlyReading, GpuReading, HostAgentCredential

__all__ = [
    "ACTIONS",
    "COMPUTE_SLICES",
    "SPOT_PRICE_FLOOR_SHARE",
    "SPOT_PRICE_STALE_AFTER",
    "TASK_OF_STATUS",
    "ApprovalPolicy",
    "GpuHourlyReading",
    "GpuReading",
    "HostAgentCredential",
    "IdlePolicy",
    "Image",
    "Instance",
    "InstanceAction",
    "InstanceEvent",
    "InstanceQuerySet",
    "InstanceType",
    "InstanceTypeQuerySet",
    "InterruptionPolicy",
    "Job",
    "JobEvent",
    "JobLogChunk",
    "JobMarket",
    "JobRun",
    "JobScalar",
    "JobWorkdir",
    "LeaseNotice",
    "Market",
    "MigProfile",
    "MigSlot",
    "Notebook",
    "Order",
    "OrderEvent",
    "Placement",
    "Pool",
    "PoolEvent",
    "PoolQuerySet",
    "PoolSample",
    "PoolSchedule",
    "ProjectScopedQuerySet",
    "Quota",
    "QuotaChange",
    "QuotaLimit",
    "QuotaRequest",
    "QuotaRequestQuerySet",
    "SimulatedHost",
    "gpu_equivalents",
    "gpus_in_words",
    "gpus_number",
    "validate_image_ids",
]
