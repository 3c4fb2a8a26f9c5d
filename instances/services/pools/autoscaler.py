"""instances/services/pools/autoscaler.py: the autoscaler pass (beat): every active pool's
desired count from its schedules, its GPU target and manual changes, then converge: launch what
is missing, end what is surplus.

- One transaction, pool rows locked with SKIP LOCKED: a second pass started meanwhile skips
  the pools the first holds, so each missing host is launched once. Hosts are Instance rows
  with their ClientToken stored before any cloud call (the provision task is sent on commit),
  so a worker killed mid-pass leaves either nothing or rows the reconciler carries on.
- Reads are bulk, a fixed number of queries whatever the number of pools and hosts; only
  work adds queries (a pool that launches is admitted under its project lock, as an order is;
  each host ended is a transition).
- A launch passes the admission checks (quota, budget) through admission_refusal(); a refusal
  launches what fits, records the reason as a pool event, and waits with a doubling backoff
  (one notice per streak of refusals). Only the refused market waits: a budget that blocks
  on-demand leaves the pool's spot launches and spot replacements going.
- Market mix: the first on_demand_base hosts on-demand, spot_percent of the rest spot. A spot
  market without capacity (a hold set by the provision task) is filled with on-demand when the
  pool allows on-demand (spot_percent < 100 or policy fallback_on_demand); when spot returns the
  spot host is launched first and the on-demand one ended only once it runs.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from instances.models import (
    TASK_OF_STATUS,
    Instance,
    InstanceEvent,
    InstanceType,
    InterruptionPolicy,
    Market,
    Pool,
    PoolEvent,
    PoolSample,
    PoolSchedule,
)
from instances.services.admission import admission_refusal
from instances.services.hosts import instances_end
from instances.services.orders import OrderRequest, order_estimate, order_request_of
from instances.services.pools.checks import pool_launch_refusal
from instances.services.pools.lifecycle import pool_event
from instances.services.pools.plan import (
    SERVING,
    Host,
    fallback_types,
    instance_utilization,
    plan,
    pool_utilization,
    quota_hosts,
)
from instances.services.pools.schedules import schedules_fire
from instances.services.queue import enqueue
from portal.lib.errors import Conflict
from portal.services import notice_send, notices_close

ACTOR = "system:autoscaler"
S = Instance.Status
K = PoolEvent.Kind
MINUTE = timedelta(minutes=1)
POOL_FIELDS = [
    "min_size",
    "desired",
    "max_size",
    "status",
    "status_reason",
    "last_scaled_at",
    "blocked_until",
    "blocked_markets",
    "refusal_streak",
    "refusal_reason",
    "capacity_holds",
]


# --- the pass --------------------------------------------------------------------------------


@dataclass
class AutoscaleReport:
    pools: int = 0
    launched: list = field(default_factory=list)
    ended: list = field(default_factory=list)
    refused: list = field(default_factory=list)
    moved: list = field(default_factory=list)
    # For the metrics: hosts by ("launched" or "ended", market), refusals by ("held", limit).
    counts: Counter = field(default_factory=Counter)

    def count_ended(self, hosts: list[Host], ended: list[str]) -> None:
        self.ended += ended
        market = {str(h.id): h.market for h in hosts}
        self.counts.update(("ended", market[pk]) for pk in ended)


def autoscale(*, now: datetime | None = None) -> AutoscaleReport:
    """One pass over every active (and deleting) pool not held by another pass."""
    now = now or timezone.now()
    report = AutoscaleReport()
    with transaction.atomic():
        pools = list(
            Pool.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(status__in=(Pool.Status.ACTIVE, Pool.Status.DELETING))
            .select_related("instance_type", "project", "launch_order", "created_by")
            .order_by("pk")
        )
        if not pools:
            return report
        report.pools = len(pools)
        ids = [pool.pk for pool in pools]
        schedules = defaultdict(list)
        for schedule in PoolSchedule.objects.filter(pool_id__in=ids, enabled=True):
            schedules[schedule.pool_id].append(schedule)
        hosts = defaultdict(list)
        utilization = instance_utilization(ids, now)
        handover = timedelta(seconds=settings.PORTAL_POOL_LEASE_HANDOVER_SECONDS)
        for row in Instance.objects.filter(pool_id__in=ids, status__in=Instance.LIVE).values(
            "id",
            "pool_id",
            "market",
            "status",
            "spot_warning_at",
            "launched_at",
            "lease_expires_at",
        ):
            hosts[row["pool_id"]].append(row)
        series = pool_utilization(pools, now)
        types = fallback_types(pools)
        quotas = quota_hosts(pools)
        events: list[PoolEvent] = []
        changed_schedules: list[PoolSchedule] = []
        samples: list[PoolSample] = []
        for pool in pools:
            before = {name: getattr(pool, name) for name in POOL_FIELDS}
            pool_hosts = [
                Host(
                    id=row["id"],
                    market=row["market"],
                    status=row["status"],
                    leaving=(
                        row["spot_warning_at"] is not None
                        and pool.interruption_policy != InterruptionPolicy.NOTIFY
                    )
                    or _lease_ending(row, handover, now),
                    utilization=utilization.get(row["id"]),
                    launched_at=row["launched_at"],
                )
                for row in hosts[pool.pk]
            ]
            if pool.status == Pool.Status.DELETING:
                _finish_deleting(pool, pool_hosts, now, events, report)
            else:
                changed_schedules += schedules_fire(
                    pool, schedules[pool.pk], now, events, actor=ACTOR
                )
                _target_track(pool, pool_hosts, series.get(pool.pk, {}), now, events)
                _converge(pool, pool_hosts, types, now, events, report)
                samples.append(_sample(pool, pool_hosts, quotas, now))
            if any(getattr(pool, name) != value for name, value in before.items()):
                report.moved.append(pool)
        if report.moved:
            Pool.objects.bulk_update(report.moved, POOL_FIELDS)
        if changed_schedules:
            PoolSchedule.objects.bulk_update(changed_schedules, ["last_run_at", "next_run_at"])
        PoolEvent.objects.bulk_create(events)
        PoolSample.objects.bulk_create(samples)
        retention = timedelta(days=settings.PORTAL_POOL_SAMPLE_RETENTION_DAYS)
        PoolSample.objects.filter(at__lt=now - retention).delete()
    return report


def _lease_ending(row: dict, handover: timedelta, now: datetime) -> bool:
    """A pool host is handed over once its lease ends within the handover window, or within
    half its lease when that is shorter (a replacement is never leaving from its launch)."""
    ends, began = row["lease_expires_at"], row["launched_at"]
    if ends is None or began is None:
        return False
    return ends - now <= min(handover, (ends - began) / 2)


def _event(events, pool, kind, message, *, now, old=None, new=None) -> None:
    events.append(
        pool_event(pool, kind, message, actor=ACTOR, old=old, new=new, at=now, save=False)
    )


def _set_desired(pool: Pool, value: int, *, kind, why: str, now, events) -> bool:
    value = max(pool.min_size, min(pool.max_size, value))
    if value == pool.desired:
        return False
    _event(events, pool, kind, why, now=now, old=pool.desired, new=value)
    pool.desired = value
    return True


def _target_track(pool: Pool, hosts: list[Host], minutes: dict, now: datetime, events) -> None:
    """Keep average GPU utilization near the target: out when every minute of the last
    scale_out_minutes was above it, in when every minute of the last scale_in_minutes was
    below, never within cooldown_minutes of the last move. Minutes with no reading are
    skipped, but at least half of the window must have readings."""
    target = pool.target_gpu_utilization
    if target is None:
        return
    if pool.last_scaled_at and now < pool.last_scaled_at + pool.cooldown_minutes * MINUTE:
        return
    end = now.replace(second=0, microsecond=0)

    def window(length: int) -> list[float]:
        start = end - length * MINUTE
        values = [avg for minute, avg in minutes.items() if start <= minute < end]
        return values if len(values) >= max(1, math.ceil(length / 2)) else []

    # Hosts being handed over are not counted twice beside their replacements.
    warm = sum(
        1 for h in hosts if h.status == S.RUNNING and h.utilization is not None and not h.leaving
    )
    out, into = window(pool.scale_out_minutes), window(pool.scale_in_minutes)
    if out and min(out) > target and warm:
        mean = sum(out) / len(out)
        # Proportional, as docs/researchers.md (Pools) says and EC2 target tracking does: no "at
        # least one more" floor (hot warm hosts fewer than desired: the ones still warming take
        # load).
        want = math.ceil(warm * mean / target)
        if _set_desired(
            pool,
            want,
            kind=K.TARGET,
            why=f"GPU utilization {mean:.0f} % above the {target} % target for "
            f"{pool.scale_out_minutes} min: scale out",
            now=now,
            events=events,
        ):
            pool.last_scaled_at = now
    elif into and max(into) < target and warm and not any(h.pending for h in hosts):
        mean = sum(into) / len(into)
        # No "at least one fewer" floor: 3 hosts at 69 % of a 70 % target would go to 2 at
        # 104 %, then out again after the cooldown, and so on.
        want = math.ceil(warm * mean / target)
        if _set_desired(
            pool,
            want,
            kind=K.TARGET,
            why=f"GPU utilization {mean:.0f} % below the {target} % target for "
            f"{pool.scale_in_minutes} min: scale in",
            now=now,
            events=events,
        ):
            pool.last_scaled_at = now


def _held(pool: Pool, market: str, type_name: str, now: datetime) -> bool:
    until = pool.capacity_holds.get(f"{market}:{type_name}")
    return bool(until) and datetime.fromisoformat(until) > now


def _launch_types(pool: Pool, market: str, types: dict, now: datetime) -> list[InstanceType]:
    """The types a launch on ``market`` may try, in order: the pool's own, then its fallbacks,
    leaving out those the cloud had no capacity for lately."""
    found = []
    for name in pool.instance_type_names():
        if not _held(pool, market, name, now):
            kind = pool.instance_type if name == pool.instance_type.name else types.get(name)
            if kind is not None:
                found.append(kind)
    return found


def _converge(pool: Pool, hosts: list[Host], types: dict, now: datetime, events, report) -> None:
    spot_type = _launch_types(pool, Market.SPOT, types, now)
    od_type = _launch_types(pool, Market.ON_DEMAND, types, now)
    step = plan(
        desired=pool.desired,
        base=pool.on_demand_base,
        spot_percent=pool.spot_percent,
        hosts=hosts,
        spot_available=bool(spot_type),
        on_demand_fill=pool.spot_percent < 100
        or pool.interruption_policy == InterruptionPolicy.FALLBACK_ON_DEMAND,
    )
    reasons: dict[str, list[Host]] = defaultdict(list)
    for host, why in step.end:
        reasons[why].append(host)
    for why, group in reasons.items():
        ended = instances_end(
            Instance.objects.filter(pk__in=[h.id for h in group]),
            reason=f"pool {pool.name}: {why}",
            actor=ACTOR,
        )
        if ended:
            report.count_ended(group, ended)
            _event(events, pool, K.TERMINATED, f"ending {len(ended)}: {why}", now=now)
    if step.spot_short and pool.refusal_reason != "no spot capacity":
        _event(
            events,
            pool,
            K.CAPACITY,
            f"the cloud has no spot capacity for {', '.join(pool.instance_type_names())}; "
            f"{step.spot_short} spot hosts wait for it (the pool's mix allows no on-demand)",
            now=now,
        )
    wanted = [(Market.ON_DEMAND, od_type, step.launch_on_demand)]
    wanted.append((Market.SPOT, spot_type, step.launch_spot))
    waiting = _waiting_markets(pool, now)
    wanted = [(m, t, n) for m, t, n in wanted if n > 0 and t and m not in waiting]
    if wanted:
        _launch(pool, hosts, wanted, now, events, report, waiting)


def _waiting_markets(pool: Pool, now: datetime) -> set[str]:
    """The markets whose launches wait out the backoff of a refusal; the other still launches."""
    if pool.blocked_until and now < pool.blocked_until:
        return set(pool.blocked_markets)
    return set()


def _launch(pool: Pool, hosts, wanted, now: datetime, events, report, waiting: set[str]) -> None:
    """Admit as many of the wanted hosts as the limits allow (the project row stays locked
    until the pass commits), create their rows and send their launches on commit.

    Each part of the launch (a market and the type it launches on) is checked as what it is:
    its market for the budget's policy and the quota's markets, its type for the quota's
    types, its price for the budget. On-demand goes first, the dearer part and the one a
    budget may refuse alone; its rows are written before the spot part is checked, so the
    checks count them, and a spot part still launches when on-demand is refused."""
    order = pool.launch_order
    base = order_request_of(order)
    rows: list[Instance] = []
    refused, refused_markets = None, set()
    for market, candidates, wanted_count in wanted:
        instance_type, held = _approved_type(pool, base, market, candidates)
        if instance_type is None:
            refused = refused or held
            refused_markets.add(market)
            continue

        def refusal(count: int, market=market, instance_type=instance_type):
            request = dataclasses.replace(
                base,
                count=count,
                market=market,
                instance_type=instance_type,
                estimate=order_estimate(
                    instance_type=instance_type,
                    market=market,
                    count=count,
                    lease_hours=order.lease_hours,
                ),
            )
            return admission_refusal(request)

        admitted = wanted_count
        part_refused = refusal(wanted_count)
        if part_refused is not None:
            refused = refused or part_refused
            refused_markets.add(market)
            low, high = 0, wanted_count - 1  # the largest count that fits, by halves
            while low < high:
                middle = (low + high + 1) // 2
                if refusal(middle) is None:
                    low = middle
                else:
                    high = middle - 1
            admitted = low
        if admitted:
            rows += _create_hosts(pool, market, instance_type, admitted, now)
    admitted = len(rows)
    counted = sum(1 for h in hosts if h.status in SERVING and not h.leaving)
    if admitted:
        report.launched += [str(r.pk) for r in rows]
        report.counts.update(("launched", r.market) for r in rows)
        by_market = defaultdict(int)
        for row in rows:
            by_market[row.market.replace("_", "-")] += 1
        said = ", ".join(f"{n} {m}" for m, n in sorted(by_market.items()))
        _event(events, pool, K.LAUNCHED, f"launching {said} toward desired {pool.desired}", now=now)
    if refused is None:
        if waiting:
            return  # the other market still waits out its refusal
        if pool.refusal_streak:
            _event(events, pool, K.LAUNCHED, "the limit that held the pool moved", now=now)
            notices_close(topic=_held_topic(pool), reason="The limit moved; the pool grows.")
        pool.refusal_streak, pool.refusal_reason, pool.blocked_until = 0, "", None
        pool.blocked_markets = []
        return
    what = "quota" if refused.code.startswith("quota") else "budget"
    if refused.code == "approval_required":
        what = "the approval policy"
    elif refused.code not in ("quota_exceeded", "budget_exceeded"):
        what = "a limit"
    sentence = f"{what} holds pool at {counted + admitted} of {pool.desired}: {refused.message}"
    report.refused.append((pool, sentence))
    report.counts["held", what if what in ("quota", "budget") else "other"] += 1
    # A new event when the pool is held at another count (not for each retry's wording).
    if pool.refusal_streak == 0 or pool.refusal_reason.split(":")[0] != sentence.split(":")[0]:
        _event(events, pool, K.REFUSED, sentence, now=now)
    if pool.refusal_streak == 0:
        # One notice per streak of refusals: the retries that follow say nothing new.
        notice_send(
            user=pool.created_by,
            subject=f"Pool {pool.name} in {pool.project.slug} cannot grow",
            body=f"{sentence} The pool retries with backoff and grows when the limit moves.",
            link=f"/pools/{pool.pk}/",
            topic=_held_topic(pool),
        )
    wait = min(
        settings.PORTAL_POOL_BACKOFF_SECONDS * 2 ** min(pool.refusal_streak, 16),
        settings.PORTAL_POOL_BACKOFF_MAX_SECONDS,
    )
    pool.refusal_streak += 1
    pool.refusal_reason = sentence[:500]
    pool.blocked_until = now + timedelta(seconds=wait)
    pool.blocked_markets = sorted(refused_markets | waiting)


def _approved_type(
    pool: Pool, base: OrderRequest, market: str, candidates: list[InstanceType]
) -> tuple[InstanceType | None, Conflict | None]:
    """The first of ``candidates`` the project's approval policy lets the pool launch on
    ``market`` (an order's own rule, fallbacks included), or None and the refusal saying why."""
    first = None
    for kind in candidates:
        why = pool_launch_refusal(
            pool, dataclasses.replace(base, market=market, instance_type=kind)
        )
        if why is None:
            return kind, None
        first = first or why
    return None, Conflict(
        f"{first}; the pool does not launch it without approval. Ask a manager to approve a "
        "pool that may launch it, or remove that fallback",
        code="approval_required",
    )


def _create_hosts(
    pool: Pool, market: str, instance_type: InstanceType, count: int, now: datetime
) -> list[Instance]:
    """The admitted hosts' rows (ClientToken fixed now, before any cloud call), their first
    events, and their launches sent once the pass commits."""
    order = pool.launch_order
    rows = []
    for _ in range(count):
        pk = uuid.uuid4()
        rows.append(
            Instance(
                id=pk,
                order=order,
                project=pool.project,
                owner=pool.created_by,
                instance_type=instance_type,
                image_id=pool.image_id,
                market=market,
                region=order.region,
                client_token=f"portal-{pk.hex}",
                status_changed_at=now,
                pool=pool,
            )
        )
    Instance.objects.bulk_create(rows)
    InstanceEvent.objects.bulk_create(
        InstanceEvent(
            instance=row,
            old_status="",
            new_status=S.REQUESTED,
            reason=f"launched by pool {pool.name} ({row.market.replace('_', '-')})",
            at=now,
            actor=ACTOR,
        )
        for row in rows
    )
    for row in rows:
        enqueue(TASK_OF_STATUS[S.REQUESTED], str(row.pk))
    return rows


def _finish_deleting(pool: Pool, hosts: list[Host], now: datetime, events, report) -> None:
    live = [h for h in hosts if h.status not in (S.TERMINATING, S.INTERRUPTED)]
    if live:
        ended = instances_end(
            Instance.objects.filter(pk__in=[h.id for h in live]),
            reason=f"pool {pool.name} deleted",
            actor=ACTOR,
        )
        report.count_ended(live, ended)
    elif not hosts:
        pool.status = Pool.Status.DELETED
        _event(events, pool, K.DELETED, "its last host has ended", now=now)


def _sample(pool: Pool, hosts: list[Host], quotas: dict, now: datetime) -> PoolSample:
    running = [h for h in hosts if h.status == S.RUNNING]
    return PoolSample(
        pool=pool,
        at=now,
        desired=pool.desired,
        running_on_demand=sum(1 for h in running if h.market == Market.ON_DEMAND),
        running_spot=sum(1 for h in running if h.market == Market.SPOT),
        pending=sum(1 for h in hosts if h.pending),
        quota_hosts=quotas.get(pool.pk),
    )


def _held_topic(pool) -> str:
    """The topic of a pool's "cannot grow" notice: it closes when the limit moves."""
    return f"pool:{pool.pk}:held"
