"""AWS EC2 through boto3. Region, endpoint and the types to offer come from settings."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.utils import timezone

from instances.providers.base import (
    InstanceTypeSpec,
    Provider,
    ProviderPermanentError,
    ProviderTransientError,
    SpotPriceQuote,
)

log = logging.getLogger(__name__)

# Error codes worth retrying; everything else is the caller's or the account's problem.
TRANSIENT_CODES = {
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "InsufficientInstanceCapacity",
    "InternalError",
    "ServiceUnavailable",
    "Unavailable",
}
_NETWORK = re.compile(r"(?P<burst>up to )?(?P<gbps>[\d.]+) gigabit", re.IGNORECASE)


def translate(error: Exception) -> Exception:
    """Map a botocore error to the provider's transient/permanent errors."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", str(error))
        kind = ProviderTransientError if code in TRANSIENT_CODES else ProviderPermanentError
        return kind(f"{code}: {message}", code=code)
    if isinstance(error, BotoCoreError):
        return ProviderTransientError(str(error), code=type(error).__name__)
    return error


class EC2Provider(Provider):
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
