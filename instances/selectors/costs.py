"""instances/selectors/costs.py: running time and cost so far of a host, from its events (the
cloud's transition times), and what an order will cost (its estimate).

What a host has cost is billing's rule, not ours: the figure comes from the instance_cost slot
of audit/registry.py (billing's metering registers there: the same rules and price histories
that make the bill, so an ended host shows what it is billed), because instances may not import
billing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from audit.registry import INSTANCE_COST, INSTANCE_COST_NOTES, INSTANCE_RATE
from instances.models import Instance, InstanceEvent, InstanceType, Market, Order
from instances.selectors.mig import slice_rate


def running_intervals(
    events: list[InstanceEvent], now: datetime
) -> list[tuple[datetime, datetime]]:
    """Each period the host was running: from entering `running` to leaving it (or now)."""
    intervals = []
    started = None
    for event in sorted(events, key=lambda e: (e.at, e.pk or 0)):
        if event.old_status == event.new_status:
            continue
        if event.new_status == Instance.Status.RUNNING and started is None:
            started = event.at
        elif event.new_status != Instance.Status.RUNNING and started is not None:
            intervals.append((started, event.at))
            started = None
    if started is not None:
        intervals.append((started, max(now, started)))
    return intervals


def running_seconds(events: list[InstanceEvent], now: datetime) -> int:
    return int(sum((end - start).total_seconds() for start, end in running_intervals(events, now)))


def costs_so_far(instances: Iterable[Instance], *, now: datetime) -> dict:
    """What each host has cost up to ``now`` (instance pk -> dollars, to the micro-dollar), in a
    fixed number of queries for any number of hosts. Prefetch their events (and select their
    type and order) to spare those reads."""
    return INSTANCE_COST.get()(list(instances), now=now)


def cost_so_far(instance: Instance, events: list[InstanceEvent], now: datetime) -> Decimal:
    """One host's ``costs_so_far``. ``events`` are the host's own, as the callers read them
    (``instance.events``): the cost reads them from the host, prefetched or not."""
    return costs_so_far([instance], now=now)[instance.pk]


def rate_now(instance: Instance) -> Decimal:
    """What a host costs per hour while it runs, in dollars (billing's rule, the
    instance_rate slot): the list price on-demand, the latest spot price for spot."""
    return INSTANCE_RATE.get()(instance)


def cost_notes(instances: Iterable[Instance], *, now: datetime) -> dict:
    """For each host, the billing rule (in a sentence) that makes its cost differ from its
    running seconds at its rate, or "" (billing's rules, the instance_cost_notes slot)."""
    return INSTANCE_COST_NOTES.get()(list(instances), now=now)


@dataclass(frozen=True)
class Estimate:
    """What an order will cost: per host-hour rate, and per hour, day and lease for all hosts."""

    price_per_host_hour: Decimal
    per_hour: Decimal
    per_day: Decimal
    per_lease: Decimal
    basis: str

    @classmethod
    def at_rate(cls, rate: Decimal, *, count: int, lease_hours: int, basis: str) -> Estimate:
        per_hour = rate * count
        return cls(
            price_per_host_hour=rate,
            per_hour=per_hour,
            per_day=per_hour * 24,
            per_lease=per_hour * lease_hours,
            basis=basis,
        )


def order_estimate(
    *,
    instance_type: InstanceType,
    market: str,
    count: int,
    lease_hours: int,
    mig_profile=None,
    share: Decimal | None = None,
) -> Estimate:
    """List price for on-demand; the current spot price for spot (list price while unknown or
    not credible: InstanceType.spot_price_doubt). For slices of ``mig_profile``, the slice's
    share of one GPU of it (``share``: the one the order was placed with; else the profile's
    now)."""
    doubt = instance_type.spot_price_doubt
    if market == Market.SPOT and instance_type.spot_price_per_hour is not None and not doubt:
        rate = instance_type.spot_price_per_hour
        basis = f"spot price seen {instance_type.spot_price_at:%Y-%m-%d %H:%M} UTC"
    else:
        rate = instance_type.on_demand_price_per_hour
        basis = "on-demand list price"
        if market == Market.SPOT:
            basis = "on-demand list price (" + (doubt or "no spot price seen yet") + ")"
    if mig_profile is not None:
        share = mig_profile.price_share if share is None else share
        rate = slice_rate(rate, instance_type.gpu_count, share)
        basis = f"{mig_profile.name} slice: {share} of one GPU at the {basis}"
    return Estimate.at_rate(rate, count=count, lease_hours=lease_hours, basis=basis)


def order_quoted_estimate(order: Order) -> Estimate:
    """What a placed order costs at the price quoted when it was placed."""
    basis = "spot price when ordered" if order.market == Market.SPOT else "on-demand list price"
    return Estimate.at_rate(
        order.quoted_price_per_hour, count=order.count, lease_hours=order.lease_hours, basis=basis
    )
