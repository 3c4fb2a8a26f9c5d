"""The simulated cloud's spot market: a price that drifts on a six-hour wave, and interruptions
(random at PORTAL_SIMULATED_INTERRUPTIONS_PER_HOUR, or by hand) announced
PORTAL_SPOT_WARNING_LEAD_SECONDS ahead, as EC2's rebalance recommendation and two-minute
warning; and its console, ending hosts behind the portal's back as an interruption does. A
mixin of SimulatedProvider, whose host rows and settling it uses."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from instances.data import list_prices
from instances.models import SimulatedHost
from instances.providers import spot_events
from instances.providers.base import (
    CloudHost,
    ProviderPermanentError,
    SpotPriceQuote,
    SpotWarning,
)
from instances.providers.faults import unit_hash

SPOT_INTERRUPTION_REASON = "Server.SpotInstanceTermination: Spot Instance termination"
INTERRUPTION_BUCKET = timedelta(minutes=10)

SPOT_STEP = timedelta(minutes=10)
SPOT_PERIOD_SECONDS = 6 * 3600
SPOT_HISTORY_LIMIT = timedelta(days=7)
_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


class SpotMarket:
    """Spot prices, warnings and interruptions of the simulated cloud."""

    def spot_price_at(self, instance_type: str, on_demand: Decimal, at: datetime) -> Decimal:
        """The simulated market: a type-specific discount that drifts on a six-hour wave."""
        base = 0.28 + 0.14 * unit_hash(self.seed, instance_type, "base")
        phase = 2 * math.pi * unit_hash(self.seed, instance_type, "phase")
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

    def _spot_price_now(self, instance_type: str) -> Decimal | None:
        price = list_prices(settings.PORTAL_PRICE_FILE).get(instance_type)
        if price is None:
            return None
        return self.spot_price_at(instance_type, price.on_demand, timezone.now())

    def _interrupted_at(self, host: SimulatedHost, now: datetime) -> datetime | None:
        """The first 10-minute bucket in which the simulated market decides to take this host
        back: it warns then and takes it ``warning_lead`` later."""
        if host.market != "spot" or not self.interruptions_per_hour:
            return None
        chance = self.interruptions_per_hour * INTERRUPTION_BUCKET.total_seconds() / 3600
        start = host.state_changed_at
        bucket = 0
        while start + INTERRUPTION_BUCKET * bucket < now:
            at = start + INTERRUPTION_BUCKET * bucket
            if unit_hash(self.seed, host.cloud_id, "interrupt", bucket) < chance:
                return max(at, start)
            bucket += 1
        return None

    def _warn(self, host: SimulatedHost, at: datetime) -> None:
        """Announce that the market takes ``host`` back ``warning_lead`` after ``at``: the
        rebalance recommendation and the interruption warning, once (conditional update), and
        on the SQS queue too when one is configured, as EventBridge would deliver them."""
        action_at = at + self.warning_lead
        announced = SimulatedHost.objects.filter(pk=host.pk, warned_at__isnull=True).update(
            warned_at=at, interrupt_at=action_at
        )
        host.refresh_from_db()
        if announced and spot_events.queue_configured():
            for warning in self._warnings_of(host):
                spot_events.queue_send(warning)

    @staticmethod
    def _warnings_of(row: SimulatedHost) -> list[SpotWarning]:
        return [
            SpotWarning(cloud_id=row.cloud_id, kind=SpotWarning.REBALANCE, at=row.warned_at),
            SpotWarning(
                cloud_id=row.cloud_id,
                kind=SpotWarning.INTERRUPTION,
                at=row.warned_at,
                action_at=row.interrupt_at,
            ),
        ]

    def spot_warnings(self) -> list[SpotWarning]:
        """The warnings of every spot host the market is about to take back. Reading them also
        moves the market on (a host whose interruption time came is warned now)."""
        rows = SimulatedHost.objects.filter(market="spot", state=SimulatedHost.State.RUNNING)
        warnings = []
        for row in rows:
            row = self._settle(row)
            if row.warned_at is not None and row.state == SimulatedHost.State.RUNNING:
                warnings.extend(self._warnings_of(row))
        return warnings

    def warn(self, cloud_id: str) -> CloudHost:
        """Announce that the market takes this spot host back in ``warning_lead`` (EC2's
        rebalance recommendation and two-minute warning), then take it at that time."""
        row = self._get(cloud_id)
        if row.market != "spot":
            raise ProviderPermanentError(f"{cloud_id} is not a spot host.", code="NotSpot")
        self._refuse_if_gone(row, "interrupted")
        self._warn(row, timezone.now())
        return self._host(row)

    def interrupt(self, cloud_id: str) -> CloudHost:
        """Take a spot host back now, with no warning (EC2's warning is best effort)."""
        row = self._get(cloud_id)
        if row.market != "spot":
            raise ProviderPermanentError(f"{cloud_id} is not a spot host.", code="NotSpot")
        return self._end(row, SPOT_INTERRUPTION_REASON)

    # --- the console: the cloud acting behind the portal's back ------------------------------

    def console_hosts(self) -> list[CloudHost]:
        """Every host, as the cloud's own console lists them: no API faults on this side."""
        return [self._host(self._settle(row)) for row in SimulatedHost.objects.all()]

    def _end(self, row: SimulatedHost, reason: str) -> CloudHost:
        if row.state != SimulatedHost.State.TERMINATED:
            SimulatedHost.objects.filter(pk=row.pk).update(
                state=SimulatedHost.State.TERMINATED,
                state_changed_at=timezone.now(),
                state_reason=reason,
                settles_at=None,
            )
        row = SimulatedHost.objects.get(pk=row.pk)
        self._agent_stops(row)
        return self._host(row)

    def kill(self, cloud_id: str) -> CloudHost:
        """Terminate a host without telling the portal (someone used the cloud console)."""
        return self._end(
            self._get(cloud_id), "Client.UserInitiatedShutdown: terminated outside the portal"
        )
