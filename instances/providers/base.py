"""The interface every cloud implements, and the errors it may raise."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal


class ProviderError(Exception):
    """Base of the errors a provider raises; ``code`` is the cloud's own error code."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class ProviderTransientError(ProviderError):
    """Worth retrying with backoff: throttling, a capacity blip, a network fault."""


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


@dataclass(frozen=True)
class SpotPriceQuote:
    """One spot price observation: the price in force from ``at``."""

    instance_type: str
    region: str
    availability_zone: str
    price_per_hour: Decimal
    at: datetime


class Provider(abc.ABC):
    """A cloud. Implementations must be safe to call again with the same arguments."""

    name: str

    @abc.abstractmethod
    def instance_types(self) -> list[InstanceTypeSpec]:
        """The GPU host shapes this cloud offers in the configured region."""

    @abc.abstractmethod
    def spot_prices(
        self, instance_types: Iterable[str], *, since: datetime | None = None
    ) -> list[SpotPriceQuote]:
        """Spot prices for the given types in the configured region, newest included."""
