"""A cloud simulated inside the portal's database, so web and worker processes share it.

Deterministic when seeded (``PORTAL_SIMULATED_SEED``): the same seed and clock give the same
spot prices, boot delays and interruptions.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from instances.catalog import list_prices, simulated_cloud_rows
from instances.providers.base import InstanceTypeSpec, Provider, SpotPriceQuote

SPOT_STEP = timedelta(minutes=10)
SPOT_PERIOD_SECONDS = 6 * 3600
SPOT_HISTORY_LIMIT = timedelta(days=7)
_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


def _unit_hash(*parts: object) -> float:
    """A stable number in [0, 1) from the parts (Python's hash() is salted per process)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SimulatedProvider(Provider):
    name = "simulated"

    def __init__(self) -> None:
        self.region = settings.PORTAL_REGION
        self.seed = settings.PORTAL_SIMULATED_SEED

    def _rows(self) -> list[dict]:
        return simulated_cloud_rows()

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
            )
            for row in self._rows()
            if self.region in row["regions"]
        ]

    def spot_price_at(self, instance_type: str, on_demand: Decimal, at: datetime) -> Decimal:
        """The simulated market: a type-specific discount that drifts on a six-hour wave."""
        base = 0.28 + 0.14 * _unit_hash(self.seed, instance_type, "base")
        phase = 2 * math.pi * _unit_hash(self.seed, instance_type, "phase")
        seconds = (at - _EPOCH).total_seconds()
        ratio = base + 0.06 * math.sin(2 * math.pi * seconds / SPOT_PERIOD_SECONDS + phase)
        return (on_demand * Decimal(f"{ratio:.6f}")).quantize(Decimal("0.0001"))

    def spot_prices(
        self, instance_types: Iterable[str], *, since: datetime | None = None
    ) -> list[SpotPriceQuote]:
        prices = list_prices(settings.PORTAL_PRICE_FILE)
        spot_types = {row["name"] for row in self._rows() if row["spot"]}
        now = timezone.now()
        step = SPOT_STEP.total_seconds()
        latest = _EPOCH + timedelta(seconds=((now - _EPOCH).total_seconds() // step) * step)
        start = max(since or latest, now - SPOT_HISTORY_LIMIT)
        quotes = []
        for name in instance_types:
            if name not in spot_types or name not in prices:
                continue
            at = latest
            while True:
                quotes.append(
                    SpotPriceQuote(
                        instance_type=name,
                        region=self.region,
                        availability_zone=f"{self.region}a",
                        price_per_hour=self.spot_price_at(name, prices[name].on_demand, at),
                        at=at,
                    )
                )
                at -= SPOT_STEP
                if at < start:
                    break
        return quotes
