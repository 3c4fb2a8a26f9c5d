"""instances/services/pools/plan.py: what the autoscaler decides for one pool (pure: plan()
takes made-up hosts in the tests) and the bulk reads a pass makes, one query each whatever the
number of pools and hosts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Avg, Q

from instances.models import GpuReading, Instance, InstanceType, Market, Pool, Quota

S = Instance.Status
SERVING = frozenset({S.REQUESTED, S.PROVISIONING, S.RUNNING, S.STARTING})
PENDING = frozenset({S.REQUESTED, S.PROVISIONING, S.STARTING})
OUT_OF_SERVICE = frozenset({S.STOPPING, S.STOPPED})
MINUTE = timedelta(minutes=1)


@dataclass
class Host:
    """What the pass needs of one live host of a pool."""

    id: object
    market: str
    status: str
    # Warned of a spot interruption, or its lease ends soon: its replacement may start now.
    leaving: bool = False
    utilization: float | None = None
    launched_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.status in PENDING


@dataclass
class Plan:
    launch_on_demand: int = 0
    launch_spot: int = 0
    end: list = field(default_factory=list)  # (Host, why)
    spot_short: int = 0  # spot hosts wanted that cannot be had now


def mix(desired: int, base: int, spot_percent: int) -> tuple[int, int]:
    """(on-demand, spot) for ``desired`` hosts: the base on-demand, spot_percent of the rest
    on spot (rounded down: on-demand takes the odd host, as EC2 Auto Scaling does)."""
    rest = desired - min(desired, base)
    spot = rest * spot_percent // 100
    return desired - spot, spot


def plan(
    *,
    desired: int,
    base: int,
    spot_percent: int,
    hosts: list[Host],
    spot_available: bool,
    on_demand_fill: bool,
) -> Plan:
    """What to launch and what to end so that ``hosts`` become ``desired`` in the mix. Pure:
    the tests drive it with made-up hosts."""
    result = Plan()
    result.end = [(h, "out of service (stopped)") for h in hosts if h.status in OUT_OF_SERVICE]
    counted = [h for h in hosts if h.status in SERVING and not h.leaving]
    on_demand = [h for h in counted if h.market == Market.ON_DEMAND]
    spot = [h for h in counted if h.market == Market.SPOT]
    want_od, want_spot = mix(desired, base, spot_percent)
    if not spot_available and len(spot) < want_spot:
        short = want_spot - len(spot)
        if on_demand_fill:
            want_od, want_spot = want_od + short, len(spot)
        else:
            result.spot_short = short
    missing = desired - len(counted)
    if missing > 0:
        result.launch_on_demand = min(missing, max(0, want_od - len(on_demand)))
        result.launch_spot = min(missing - result.launch_on_demand, max(0, want_spot - len(spot)))
        left = missing - result.launch_on_demand - result.launch_spot
        if left:  # one market is above its share: the other fills, spot when it can
            if spot_available and want_spot > 0:
                result.launch_spot += left
            elif on_demand_fill or want_od > 0:
                result.launch_on_demand += left
            else:
                result.spot_short += left
    elif spot_available and len(spot) < want_spot and len(on_demand) > want_od:
        # Spot is back: launch the spot host first; the on-demand one ends once it runs.
        result.launch_spot = min(want_spot - len(spot), len(on_demand) - want_od)
    if not spot_available:
        result.launch_spot = 0  # counted in spot_short above, or filled with on-demand
    surplus = len(counted) - desired
    running = sum(1 for h in counted if not h.pending)
    # Hand leaving hosts over as their replacements run, the oldest first and one by one, never
    # below desired running hosts in all: when a quota let only some replacements start, each
    # host handed over frees the room for the next one.
    serving = running + sum(1 for h in hosts if h.leaving and h.status == S.RUNNING)
    for host in sorted(
        (h for h in hosts if h.leaving and h.status in SERVING),
        key=lambda h: (not h.pending, h.launched_at.timestamp() if h.launched_at else 0.0),
    ):
        if host.pending:
            if running < desired:
                continue
        elif serving - 1 < desired:
            break
        else:
            serving -= 1
        result.end.append((host, "handed over: the hosts replacing it run"))
    left_od, left_spot = list(on_demand), list(spot)
    for _ in range(max(0, surplus)):
        if len(left_spot) > want_spot or (len(left_od) <= want_od and left_spot):
            group, why = left_spot, "spot hosts go first"
        else:
            group, why = left_od, "on-demand above the mix's share"
        if not group:
            break
        # Hosts still starting first, then the idle and least-utilized (unknown counts as busy).
        host = min(
            group,
            key=lambda h: (
                not h.pending,
                h.utilization if h.utilization is not None else 1000.0,
                -(h.launched_at.timestamp() if h.launched_at else 0.0),
            ),
        )
        if not host.pending:
            if running - 1 < desired:
                break  # never below desired running hosts: wait for the new ones to run
            running -= 1
        group.remove(host)
        result.end.append((host, f"scale-in to desired {desired}, {why}"))
    return result


# --- the bulk reads --------------------------------------------------------------------------


def instance_utilization(pool_ids: list, now: datetime) -> dict:
    """Each running pool host's mean GPU utilization over the last ten minutes (one query)."""
    rows = (
        GpuReading.objects.filter(
            instance__pool_id__in=pool_ids,
            instance__status=S.RUNNING,
            minute__gte=now - 10 * MINUTE,
        )
        .values("instance_id")
        .annotate(mean=Avg("utilization"))
        .order_by()
    )
    return {row["instance_id"]: float(row["mean"]) for row in rows}


def pool_utilization(pools: list[Pool], now: datetime) -> dict:
    """{pool id: {minute: mean utilization of its warm running hosts}} over the longest window
    any tracking pool looks at (one query, grouped by pool and minute)."""
    tracked = [p for p in pools if p.target_gpu_utilization is not None and p.is_live]
    if not tracked:
        return {}
    longest = max(max(p.scale_out_minutes, p.scale_in_minutes) for p in tracked)
    warm = Q(pk__in=[])
    for minutes in {p.warmup_minutes for p in tracked}:
        warm |= Q(
            instance__pool__warmup_minutes=minutes,
            instance__launched_at__lte=now - minutes * MINUTE,
        )
    end = now.replace(second=0, microsecond=0)
    rows = (
        GpuReading.objects.filter(
            warm,
            instance__pool_id__in=[p.pk for p in tracked],
            instance__status=S.RUNNING,
            minute__gte=end - longest * MINUTE,
            minute__lt=end,
        )
        .values("instance__pool_id", "minute")
        .annotate(mean=Avg("utilization"))
        .order_by()
    )
    found: dict = defaultdict(dict)
    for row in rows:
        found[row["instance__pool_id"]][row["minute"]] = float(row["mean"])
    return found


def fallback_types(pools: list[Pool]) -> dict:
    names = {name for pool in pools for name in pool.fallback_instance_types}
    if not names:
        return {}
    return {t.name: t for t in InstanceType.objects.offered().filter(name__in=names)}


def quota_hosts(pools: list[Pool]) -> dict:
    """How many hosts of its type each pool's project quota allows in all (None: no limit
    on it), for the chart; one query for every project's quota."""
    limits = defaultdict(list)
    for quota in Quota.objects.filter(
        project_id__in={p.project_id for p in pools}, user__isnull=True
    ):
        limits[quota.project_id].append(quota)
    found = {}
    for pool in pools:
        kind = pool.instance_type
        caps = []
        for quota in limits[pool.project_id]:
            if quota.max_instances is not None:
                caps.append(quota.max_instances)
            if quota.max_gpus is not None:
                caps.append(quota.max_gpus // kind.gpu_count)
            by_model = quota.max_gpus_by_model.get(kind.gpu_model)
            if by_model is not None:
                caps.append(by_model // kind.gpu_count)
        found[pool.pk] = min(caps) if caps else None
    return found
