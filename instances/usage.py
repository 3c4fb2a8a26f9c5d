"""Running time and cost so far of a host, from its events (the cloud's transition times).

Billing meters exactly and per rate period; this is the live figure the hosts page shows,
using the price quoted when the order was placed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from instances.models import Instance, InstanceEvent

# EC2 bills Linux per second with a 60-second minimum each time a host enters running.
MINIMUM_RUN = timedelta(seconds=60)


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


def cost_so_far(instance: Instance, events: list[InstanceEvent], now: datetime) -> Decimal:
    """Seconds billed (each run at least a minute) times the quoted hourly price."""
    billed = sum(
        max(end - start, MINIMUM_RUN).total_seconds()
        for start, end in running_intervals(events, now)
    )
    return instance.order.quoted_price_per_hour * Decimal(int(billed)) / Decimal(3600)
