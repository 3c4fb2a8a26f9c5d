"""Metering: a host's status moves and the price histories become usage rows, and the live
figure of what a host has cost so far is the same computation.

A pass (``usage_meter``) meters every host not yet fully metered and every host a late price
touches, a batch of hosts per transaction, in a fixed number of queries per batch whatever the
number of hosts and price changes. ``costs_so_far`` (the instance_cost slot that the
host pages and the API call through ``instances.selectors.costs``) applies the same rules
(billing.lib.rules) to the same rate histories (billing.services.prices), so an ended host's
live figure is its bill.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import Max, Min, Q, prefetch_related_objects
from django.utils import timezone

from audit.services import audit_record_system
from billing.lib.money import dollars
from billing.lib.rules import (
    Move,
    Run,
    Segment,
    recompute_from,
    rule_for,
    runs_from_moves,
    runs_touching,
    segment_run,
    whole_second,
)
from billing.models import ListPrice, MeterMark, MeterState, SpotPrice, Usage
from billing.services.prices import RateHistories, list_prices_snapshot
from billing.services.rollups import RollupDeltas
from instances.models import Instance, InstanceEvent, Market, gpu_equivalents


@dataclass
class MeterReport:
    instances: int = 0
    written: int = 0
    deleted: int = 0

    def add(self, other: MeterReport) -> None:
        self.instances += other.instances
        self.written += other.written
        self.deleted += other.deleted


# Every column metering computes; a row whose values are all equal is left alone.
_USAGE_VALUES = (
    "run_start",
    "end",
    "day",
    "project_id",
    "user_id",
    "instance_type_id",
    "gpu_model",
    "market",
    "pool_key",
    "mig_profile",
    "rule",
    "seconds",
    "billed_seconds",
    "list_billed_seconds",
    "gpu_seconds",
    "rate_micros",
    "list_rate_micros",
    "cost_rs",
    "list_cost_rs",
)
_ENDED = (Instance.Status.TERMINATED, Instance.Status.FAILED)
# Prices recorded this close to a pass may still be committing: look at them again next pass.
PRICE_COMMIT_MARGIN = timedelta(minutes=2)


def _usage_values(instance: Instance, segment: Segment) -> dict:
    profile = instance.order.mig_profile if instance.order.is_mig_slice else None
    return {
        "run_start": segment.run_start,
        "end": segment.end,
        "day": segment.day,
        "project_id": instance.project_id,
        "user_id": instance.owner_id,
        "instance_type_id": instance.instance_type_id,
        "gpu_model": instance.instance_type.gpu_model,
        "market": instance.market,
        "pool_key": str(instance.pool_id) if instance.pool_id else "",
        "mig_profile": instance.order.mig_profile.name if instance.order.is_mig_slice else "",
        "rule": segment.rule,
        "seconds": segment.seconds,
        "billed_seconds": segment.billed_seconds,
        "list_billed_seconds": segment.list_billed_seconds,
        # A slice's GPU-seconds are its compute slices of seven, to the whole second.
        "gpu_seconds": int(segment.seconds * gpu_equivalents(instance.instance_type, profile)),
        "rate_micros": segment.rate_micros,
        "list_rate_micros": segment.list_rate_micros,
        "cost_rs": segment.cost_rs,
        "list_cost_rs": segment.list_cost_rs,
    }


# Hosts metered in one transaction: the queries of a pass grow by one batch's worth per this
# many hosts, and a batch's watermark rows stay locked until it commits.
METER_BATCH = 500


def instance_meter(
    *, instance_id, now: datetime, since: datetime | None = None, full: bool = False
) -> MeterReport:
    """Bring one host's usage rows in step with its events and the price histories.

    Idempotent and order-free: the rows are a function of the set of status moves and prices
    (see billing.lib.rules), written by key (instance, start) and compared before writing, so a
    replay writes nothing and a late or repeated event lands on the same rows. The watermark
    (MeterMark, locked for the pass) says where to start again: the earliest new event, the
    open run's last end, or ``since`` (a late price); ``full`` recomputes everything.
    """
    return _meter_batch(
        [instance_id], now=whole_second(now), since={instance_id: since} if since else {}, full=full
    )


@dataclass
class _Plan:
    """One host of a batch whose rows are recomputed, from ``start_again`` (None: all)."""

    instance: Instance
    runs: list[Run]
    start_again: datetime | None
    touching: list[Run]

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        first = self.touching[0].start
        low = first if self.start_again is None else max(self.start_again, first)
        return low, max(run.end or now for run in self.touching)


def _meter_batch(ids: list, *, now: datetime, since: dict, full: bool) -> MeterReport:
    """``instance_meter`` for a batch of hosts in one transaction and a fixed number of
    queries: the watermarks (created if new, then locked in one order, so two passes never
    deadlock), hosts, events, price histories and stored rows are each read once for the batch,
    and the changes written in one statement each."""
    report = MeterReport(instances=len(ids))
    with transaction.atomic():
        MeterMark.objects.bulk_create(
            [MeterMark(instance_id=pk) for pk in ids], ignore_conflicts=True
        )
        marks = {
            mark.instance_id: mark
            for mark in MeterMark.objects.select_for_update()
            .filter(instance_id__in=ids)
            .order_by("instance_id")
        }
        instances = Instance.objects.select_related(
            "instance_type", "order", "order__mig_profile"
        ).in_bulk(ids)
        # Read after the hosts: an ended host's last event is committed too.
        events = defaultdict(list)
        rows = InstanceEvent.objects.filter(instance_id__in=ids)
        for instance_id, *event in rows.values_list(
            "instance_id", "id", "old_status", "new_status", "at"
        ):
            events[instance_id].append(tuple(event))
        plans: list[_Plan] = []
        for pk in ids:
            instance, mark = instances[pk], marks[pk]
            ended = instance.status in _ENDED
            runs = runs_from_moves(Move(old, new, at) for _, old, new, at in events[pk])
            start_again: datetime | None = None
            if not full and mark.metered_to is not None:
                changed = [
                    at
                    for event, old, new, at in events[pk]
                    if event > mark.last_event_id and old != new
                ]
                if mark.open_run_start is not None:
                    changed.append(mark.metered_to)
                if since.get(pk) is not None:
                    changed.append(since[pk])
                if not changed:
                    _mark_set(mark, events[pk], runs, now, ended, metered=False)
                    continue
                start_again = recompute_from(runs, min(changed), now)
            touching = runs if start_again is None else runs_touching(runs, start_again, now)
            plans.append(_Plan(instance, runs, start_again, touching))
            _mark_set(mark, events[pk], runs, now, ended, metered=True)
        histories = RateHistories(
            (plan.instance, *plan.window(now)) for plan in plans if plan.touching
        )
        stored: dict = defaultdict(dict)
        for row in _stored_rows(plans):
            stored[row.instance_id][row.start] = row
        create, update, gone = [], [], []
        deltas = RollupDeltas()
        for plan in plans:
            instance = plan.instance
            segments: list[Segment] = []
            if plan.touching:
                rates, list_rates = histories.series(instance, *plan.window(now))
                for run in plan.touching:
                    segments += segment_run(
                        run,
                        market=instance.market,
                        now=now,
                        rates=rates,
                        list_rates=list_rates,
                        since=plan.start_again,
                    )
            old = stored.pop(instance.pk, {})
            for segment in segments:
                values = _usage_values(instance, segment)
                row = old.pop(segment.start, None)
                if row is None:
                    create.append(Usage(instance_id=instance.pk, start=segment.start, **values))
                    deltas.add(create[-1], +1)
                elif any(getattr(row, name) != value for name, value in values.items()):
                    # Out of its old key and into its new one (the same key, unless the type's
                    # GPU model was renamed: then the piece moves too).
                    deltas.add(row, -1)
                    for name, value in values.items():
                        setattr(row, name, value)
                    deltas.add(row, +1)
                    update.append(row)
            for row in old.values():
                deltas.add(row, -1)
                gone.append(row)
        Usage.objects.bulk_create(create)
        Usage.objects.bulk_update(update, [*_USAGE_VALUES, "updated_at"])
        if gone:
            Usage.objects.filter(pk__in=[row.pk for row in gone]).delete()
        deltas.save()
        MeterMark.objects.bulk_update(marks.values(), _MARK_FIELDS)
        report.written = len(create) + len(update)
        report.deleted = len(gone)
    return report


def _stored_rows(plans: list[_Plan]) -> Iterable[Usage]:
    """The stored rows the plans recompute, in one query: a host's from its ``start_again``."""
    if not plans:
        return []
    starts: dict = defaultdict(list)
    for plan in plans:
        starts[plan.start_again].append(plan.instance.pk)
    wanted = [
        Q(instance_id__in=pks) if start is None else Q(instance_id__in=pks, start__gte=start)
        for start, pks in starts.items()
    ]
    return Usage.objects.filter(reduce(or_, wanted))


_MARK_FIELDS = [
    "last_event_id",
    "open_run_start",
    "metered_to",
    "usage_from",
    "usage_to",
    "final",
    "metered_at",
]


def _mark_set(mark: MeterMark, events, runs, now: datetime, ended: bool, *, metered: bool):
    open_run = runs[-1] if runs and runs[-1].end is None else None
    mark.last_event_id = max((pk for pk, *_ in events), default=0)
    mark.open_run_start = open_run.start if open_run else None
    if metered or mark.metered_to is None:
        mark.metered_to = now
    mark.usage_from = runs[0].start if runs else None
    mark.usage_to = (runs[-1].end or now) if runs else None
    mark.final = ended and open_run is None
    mark.metered_at = timezone.now()


def _late_price_hints(seen_at: datetime | None) -> dict:
    """Hosts whose usage a price recorded since ``seen_at`` may change, and from when.

    Three queries whatever the number of prices: the new spot prices by (type, region), the new
    list prices by type, then the watermarks of the hosts they touch."""
    hints: dict = {}
    if seen_at is None:
        return hints
    spot = {
        (row["instance_type_id"], row["region"]): row["first"]
        for row in SpotPrice.objects.filter(recorded_at__gt=seen_at)
        .values("instance_type_id", "region")
        .annotate(first=Min("at"))
    }
    listed = {
        row["instance_type_id"]: row["first"]
        for row in ListPrice.objects.filter(recorded_at__gt=seen_at)
        .values("instance_type_id")
        .annotate(first=Min("at"))
    }
    touched = [
        Q(
            instance__instance_type_id=type_id,
            instance__region=region,
            instance__market=Market.SPOT,
            usage_to__gt=first,
        )
        for (type_id, region), first in spot.items()
    ] + [
        Q(instance__instance_type_id=type_id, usage_to__gt=first)
        for type_id, first in listed.items()
    ]
    if not touched:
        return hints
    marks = MeterMark.objects.filter(reduce(or_, touched)).values_list(
        "instance_id",
        "instance__instance_type_id",
        "instance__region",
        "instance__market",
        "usage_to",
    )
    for pk, type_id, region, market, usage_to in marks:
        firsts = [listed.get(type_id)]
        if market == Market.SPOT:
            firsts.append(spot.get((type_id, region)))
        for first in firsts:
            if first is not None and usage_to > first:
                hints[pk] = min(hints.get(pk, first), first)
    return hints


def usage_meter(*, now: datetime | None = None, full: bool = False) -> MeterReport:
    """One metering pass: every host not yet fully metered, and every host a late price
    touches. Each batch of hosts is its own transaction; two passes at once are safe (the
    watermark rows are locked per batch, in one order), only wasteful."""
    started = timezone.now()
    now = whole_second(now or started)
    list_prices_snapshot(at=now)
    state, _ = MeterState.objects.get_or_create(id=1)
    hints = _late_price_hints(state.prices_seen_at)
    newest_event = InstanceEvent.objects.aggregate(newest=Max("id"))["newest"] or 0
    if full:
        pending = Instance.objects.all()
    else:
        # Hosts never metered, hosts not yet ended, and any host with an event since the
        # scan point (an ended host's late event, a replay).
        recent = InstanceEvent.objects.filter(id__gt=state.events_from).values("instance_id")
        pending = Instance.objects.filter(
            Q(meter_mark__isnull=True) | Q(meter_mark__final=False) | Q(pk__in=recent)
        )
    # A shared MIG host is not billed: its slices are (billing.services.prices.share_micros).
    pending = pending.exclude(order__mig_host=True)
    ids = sorted(set(pending.values_list("pk", flat=True)) | set(hints), key=str)
    report = MeterReport()
    for first in range(0, len(ids), METER_BATCH):
        report.add(_meter_batch(ids[first : first + METER_BATCH], now=now, since=hints, full=full))
    _state_advance(state, started=started, newest_event=newest_event)
    if report.written or report.deleted:
        audit_record_system(
            name="meter_usage",
            action="meter",
            summary={
                "hosts": report.instances,
                "rows_written": report.written,
                "rows_deleted": report.deleted,
            },
        )
    return report


def _state_advance(state: MeterState, *, started: datetime, newest_event: int) -> None:
    """Move the scan points on, keeping a margin for work still committing (see MeterState)."""
    settled = started - PRICE_COMMIT_MARGIN
    checkpoints = [
        (datetime.fromisoformat(when), newest) for when, newest in state.checkpoints or []
    ]
    checkpoints.append((started, newest_event))
    old_enough = [newest for when, newest in checkpoints if when <= settled]
    events_from = max([state.events_from, *old_enough])
    kept = [(when, newest) for when, newest in checkpoints if when > settled][-20:]
    MeterState.objects.filter(id=1).update(
        prices_seen_at=settled,
        events_from=events_from,
        checkpoints=[[when.isoformat(), newest] for when, newest in kept],
    )


def costs_so_far(instances: Iterable[Instance], *, now: datetime) -> dict:
    """What each host has cost up to ``now``, in dollars to the micro-dollar: its runs billed by
    the rules at the rates in force, exactly as metering bills them (for an ended host, the sum
    of its usage rows). The instance_cost slot; a fixed number of queries for any number
    of hosts, none for what the caller already loaded (type, order, events prefetched)."""
    hosts = list(instances)
    now = whole_second(now)
    prefetch_related_objects(hosts, "instance_type", "order", "events")
    runs_of = {
        instance.pk: runs_from_moves(
            Move(event.old_status, event.new_status, event.at) for event in instance.events.all()
        )
        for instance in hosts
    }

    def window(runs: list[Run]) -> tuple[datetime, datetime]:
        return runs[0].start, max(run.end or now for run in runs)

    histories = RateHistories(
        (instance, *window(runs_of[instance.pk])) for instance in hosts if runs_of[instance.pk]
    )
    costs: dict = {}
    for instance in hosts:
        runs, total = runs_of[instance.pk], 0
        if runs:
            rates, list_rates = histories.series(instance, *window(runs))
            for run in runs:
                total += sum(
                    segment.cost_rs
                    for segment in segment_run(
                        run, market=instance.market, now=now, rates=rates, list_rates=list_rates
                    )
                )
        costs[instance.pk] = dollars(total, places=6)
    return costs


def cost_notes(instances: Iterable[Instance], *, now: datetime) -> dict:
    """The instance_cost_notes slot: for each host, the sentence of every billing rule
    other than per-second billing that decides one of its runs (a spot host interrupted by the
    cloud within its first hour costs nothing; a run is billed at least a minute), or "" where
    each second is billed as it ran. Read beside the cost it changes."""
    hosts = list(instances)
    now = whole_second(now)
    prefetch_related_objects(hosts, "events")
    notes = {}
    for instance in hosts:
        runs = runs_from_moves(
            Move(event.old_status, event.new_status, event.at) for event in instance.events.all()
        )
        said = []
        for run in runs:
            rule = rule_for(instance.market, run.ended, run.seconds(now))
            if rule.key != "per_second" and rule.says not in said:
                said.append(rule.says)
        notes[instance.pk] = " ".join(said)
    return notes
