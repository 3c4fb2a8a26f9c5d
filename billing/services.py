"""Writers for billing data (DESIGN rule 1): prices, metering, rollups, budgets, bill imports."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from audit.services import audit_record_system
from billing import cur
from billing.budgets import BudgetStatus, budget_status, budget_statuses, month_of, usd
from billing.models import (
    Budget,
    BudgetAlert,
    CurImport,
    CurResult,
    DailyRollup,
    ListPrice,
    MeterMark,
    MeterState,
    RollupDelta,
    SpotPrice,
    Usage,
)
from billing.money import micros
from billing.rules import (
    Move,
    RateSeries,
    Segment,
    recompute_from,
    runs_from_moves,
    runs_touching,
    segment_run,
    whole_second,
)
from instances.models import Instance, InstanceEvent, InstanceType, Market
from instances.providers import get_provider
from instances.services import instance_system_stop, instance_type_record_spot_price
from portal.errors import Forbidden
from portal.models import Membership, Project, User
from portal.services import notice_send

log = logging.getLogger(__name__)


# --- prices --------------------------------------------------------------------------------------


def spot_prices_refresh() -> int:
    """Fetch spot prices from the provider into the history; return how many rows were new.

    Asking again for a window already stored inserts nothing (unique observation key), so a
    beat tick that runs twice is harmless.
    """
    provider = get_provider()
    types = {row.name: row for row in InstanceType.objects.offered().filter(spot_offered=True)}
    if not types:
        return 0
    newest = SpotPrice.objects.filter(instance_type__in=types.values()).aggregate(at=Max("at"))[
        "at"
    ]
    quotes = provider.spot_prices(types, since=newest - timedelta(minutes=1) if newest else None)
    rows = [
        SpotPrice(
            instance_type=types[quote.instance_type],
            region=quote.region,
            availability_zone=quote.availability_zone,
            price_per_hour=quote.price_per_hour,
            at=quote.at,
        )
        for quote in quotes
        if quote.instance_type in types
    ]
    with transaction.atomic():
        before = SpotPrice.objects.count()
        SpotPrice.objects.bulk_create(rows, ignore_conflicts=True)
        added = SpotPrice.objects.count() - before
    latest: dict[str, object] = {}
    for quote in quotes:
        current = latest.get(quote.instance_type)
        # The catalog shows the cheapest zone's newest price, as the EC2 spot page does.
        if current is None or (quote.at, -quote.price_per_hour) > (
            current.at,
            -current.price_per_hour,
        ):
            latest[quote.instance_type] = quote
    for name, quote in latest.items():
        instance_type_record_spot_price(
            instance_type_id=types[name].pk, price_per_hour=quote.price_per_hour, at=quote.at
        )
    if added:
        audit_record_system(
            name="refresh_spot_prices", action="record", summary={"observations": added}
        )
    return added


@transaction.atomic
def list_price_record(*, instance_type: InstanceType, at: datetime | None = None) -> bool:
    """Record the type's list price in the history if it differs from the one in force.

    Called when a type is saved (billing's post_save receiver) and by every metering pass (a
    price changed by a bulk update, which sends no signal, is caught within one pass).
    """
    at = whole_second(at or timezone.now())
    price = instance_type.on_demand_price_per_hour
    latest = (
        ListPrice.objects.select_for_update()
        .filter(instance_type=instance_type)
        .order_by("-at")
        .first()
    )
    if latest is not None and (latest.price_per_hour == price or latest.at > at):
        return False  # unchanged, or a newer price is already in force
    source = instance_type.price_source or "catalog"
    if instance_type.price_as_of:
        source = f"{source} (as of {instance_type.price_as_of:%Y-%m-%d})"
    ListPrice.objects.update_or_create(
        instance_type=instance_type,
        at=at,  # two changes within one second: the last one stands for that second
        defaults={"price_per_hour": price, "source": source[:300]},
    )
    return True


def list_prices_snapshot(*, at: datetime | None = None) -> int:
    """Record every type whose list price is not the one in force in the history."""
    return sum(
        list_price_record(instance_type=row, at=at) for row in InstanceType.objects.order_by("pk")
    )


def _rate_series(
    instance: Instance, start: datetime, end: datetime
) -> tuple[RateSeries, RateSeries]:
    """The charged rate and the list rate of a host over [start, end], from the histories."""
    kind = instance.instance_type
    list_rows = list(ListPrice.objects.filter(instance_type=kind).order_by("at"))
    list_points = [(row.at, micros(row.price_per_hour)) for row in list_rows]
    # Before the history began, the first price it knows (or today's, if it knows none).
    first_list = list_points[0][1] if list_points else micros(kind.on_demand_price_per_hour)
    list_rates = RateSeries(list_points, before_first=first_list)
    if instance.market != Market.SPOT:
        return list_rates, list_rates
    prices = SpotPrice.objects.filter(instance_type=kind, region=instance.region)
    zone = instance.availability_zone
    if zone and prices.filter(availability_zone=zone).exists():
        prices = prices.filter(availability_zone=zone)
    elif prices.filter(availability_zone="").exists():
        prices = prices.filter(availability_zone="")
    in_force = prices.filter(at__lte=start).order_by("-at").first()
    rows = list(prices.filter(at__gt=start, at__lt=end).order_by("at"))
    points = [
        (row.at, micros(row.price_per_hour)) for row in ([in_force] if in_force else []) + rows
    ]
    spot = RateSeries(points, before_first=micros(instance.order.quoted_price_per_hour))
    return spot, list_rates


# --- metering ------------------------------------------------------------------------------------


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
    return {
        "run_start": segment.run_start,
        "end": segment.end,
        "day": segment.day,
        "project_id": instance.project_id,
        "user_id": instance.owner_id,
        "instance_type_id": instance.instance_type_id,
        "gpu_model": instance.instance_type.gpu_model,
        "market": instance.market,
        "rule": segment.rule,
        "seconds": segment.seconds,
        "billed_seconds": segment.billed_seconds,
        "list_billed_seconds": segment.list_billed_seconds,
        "gpu_seconds": segment.seconds * instance.instance_type.gpu_count,
        "rate_micros": segment.rate_micros,
        "list_rate_micros": segment.list_rate_micros,
        "cost_rs": segment.cost_rs,
        "list_cost_rs": segment.list_cost_rs,
    }


def instance_meter(
    *, instance_id, now: datetime, since: datetime | None = None, full: bool = False
) -> MeterReport:
    """Bring one host's usage rows in step with its events and the price histories.

    Idempotent and order-free: the rows are a function of the set of status moves and prices
    (see billing.rules), written by key (instance, start) and compared before writing, so a
    replay writes nothing and a late or repeated event lands on the same rows. The watermark
    (MeterMark, locked for the pass) says where to start again: the earliest new event, the
    open run's last end, or ``since`` (a late price); ``full`` recomputes everything.
    """
    now = whole_second(now)
    report = MeterReport(instances=1)
    with transaction.atomic():
        MeterMark.objects.get_or_create(instance_id=instance_id)
        mark = MeterMark.objects.select_for_update().get(instance_id=instance_id)
        instance = Instance.objects.select_related("instance_type", "order").get(pk=instance_id)
        ended = instance.status in _ENDED  # read before the events: its event is committed too
        events = list(
            InstanceEvent.objects.filter(instance_id=instance_id).values_list(
                "id", "old_status", "new_status", "at"
            )
        )
        runs = runs_from_moves(Move(old, new, at) for _, old, new, at in events)
        start_again: datetime | None = None
        if not full and mark.metered_to is not None:
            changed = [at for pk, old, new, at in events if pk > mark.last_event_id and old != new]
            if mark.open_run_start is not None:
                changed.append(mark.metered_to)
            if since is not None:
                changed.append(since)
            if not changed:
                _mark_save(mark, events, runs, now, ended, metered=False)
                return report
            start_again = recompute_from(runs, min(changed), now)
        touching = runs if start_again is None else runs_touching(runs, start_again, now)
        segments: list[Segment] = []
        if touching:
            low = touching[0].start if start_again is None else max(start_again, touching[0].start)
            high = max(run.end or now for run in touching)
            rates, list_rates = _rate_series(instance, low, high)
            for run in touching:
                segments += segment_run(
                    run,
                    market=instance.market,
                    now=now,
                    rates=rates,
                    list_rates=list_rates,
                    since=start_again,
                )
        stored = Usage.objects.filter(instance_id=instance_id)
        if start_again is not None:
            stored = stored.filter(start__gte=start_again)
        old = {row.start: row for row in stored}
        create, update = [], []
        deltas = RollupDeltas()
        for segment in segments:
            values = _usage_values(instance, segment)
            row = old.pop(segment.start, None)
            if row is None:
                create.append(Usage(instance_id=instance_id, start=segment.start, **values))
                deltas.add(create[-1], +1)
            elif any(getattr(row, name) != value for name, value in values.items()):
                # Out of its old key and into its new one (the same key, unless the type's GPU
                # model was renamed: then the piece moves too).
                deltas.add(row, -1)
                for name, value in values.items():
                    setattr(row, name, value)
                deltas.add(row, +1)
                update.append(row)
        gone = list(old.values())
        for row in gone:
            deltas.add(row, -1)
        Usage.objects.bulk_create(create)
        Usage.objects.bulk_update(update, [*_USAGE_VALUES, "updated_at"])
        Usage.objects.filter(pk__in=[row.pk for row in gone]).delete()
        deltas.save()
        report.written = len(create) + len(update)
        report.deleted = len(gone)
        _mark_save(mark, events, runs, now, ended, metered=True)
    return report


def _mark_save(mark: MeterMark, events, runs, now: datetime, ended: bool, *, metered: bool):
    open_run = runs[-1] if runs and runs[-1].end is None else None
    mark.last_event_id = max((pk for pk, *_ in events), default=0)
    mark.open_run_start = open_run.start if open_run else None
    if metered or mark.metered_to is None:
        mark.metered_to = now
    mark.usage_from = runs[0].start if runs else None
    mark.usage_to = (runs[-1].end or now) if runs else None
    mark.final = ended and open_run is None
    mark.metered_at = timezone.now()
    mark.save()


def _late_price_hints(seen_at: datetime | None) -> dict:
    """Hosts whose usage a price recorded since ``seen_at`` may change, and from when."""
    hints: dict = {}
    if seen_at is None:
        return hints

    def hint(instance_ids, at):
        for pk in instance_ids:
            hints[pk] = min(hints.get(pk, at), at)

    spot = (
        SpotPrice.objects.filter(recorded_at__gt=seen_at)
        .values("instance_type_id", "region")
        .annotate(first=Min("at"))
    )
    for row in spot:
        hint(
            MeterMark.objects.filter(
                instance__instance_type_id=row["instance_type_id"],
                instance__region=row["region"],
                instance__market=Market.SPOT,
                usage_to__gt=row["first"],
            ).values_list("instance_id", flat=True),
            row["first"],
        )
    listed = (
        ListPrice.objects.filter(recorded_at__gt=seen_at)
        .values("instance_type_id")
        .annotate(first=Min("at"))
    )
    for row in listed:
        hint(
            MeterMark.objects.filter(
                instance__instance_type_id=row["instance_type_id"], usage_to__gt=row["first"]
            ).values_list("instance_id", flat=True),
            row["first"],
        )
    return hints


def usage_meter(*, now: datetime | None = None, full: bool = False) -> MeterReport:
    """One metering pass: every host not yet fully metered, and every host a late price
    touches. Each host is its own transaction; two passes at once are safe (the watermark
    row is locked per host), only wasteful."""
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
    ids = set(pending.values_list("pk", flat=True)) | set(hints)
    report = MeterReport()
    for instance_id in sorted(ids, key=str):
        report.add(
            instance_meter(
                instance_id=instance_id, now=now, since=hints.get(instance_id), full=full
            )
        )
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


# --- rollups -------------------------------------------------------------------------------------


# A rollup row's key and the sums it keeps, in the order RollupDelta and DailyRollup have them.
_ROLLUP_KEY = ("day", "project_id", "user_id", "instance_type_id", "gpu_model", "market")
_ROLLUP_SUMS = ("seconds", "billed_seconds", "gpu_seconds", "cost_rs", "list_cost_rs")


class RollupDeltas:
    """What one metering transaction changed, summed per rollup key (exact integers)."""

    def __init__(self) -> None:
        self.sums: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(_ROLLUP_SUMS) + 1))

    def add(self, row: Usage, sign: int) -> None:
        sums = self.sums[tuple(getattr(row, name) for name in _ROLLUP_KEY)]
        for index, name in enumerate(_ROLLUP_SUMS):
            sums[index] += sign * getattr(row, name)
        sums[-1] += sign

    def save(self) -> None:
        RollupDelta.objects.bulk_create(
            [
                RollupDelta(
                    **dict(zip(_ROLLUP_KEY, key, strict=True)),
                    **dict(zip(_ROLLUP_SUMS, sums, strict=False)),
                    pieces=sums[-1],
                )
                for key, sums in sorted(self.sums.items())
                if any(sums)
            ]
        )


_ROLLUP_COLUMNS = (
    "day, project_id, user_id, instance_type_id, gpu_model, market, "
    "seconds, billed_seconds, gpu_seconds, cost_rs, list_cost_rs, pieces"
)
_ROLLUP_SELECT = (
    "SELECT day, project_id, user_id, instance_type_id, gpu_model, market, "
    "SUM(seconds), SUM(billed_seconds), SUM(gpu_seconds), SUM(cost_rs), SUM(list_cost_rs), "
    "COUNT(*) FROM {usage} {where} "
    "GROUP BY day, project_id, user_id, instance_type_id, gpu_model, market"
)


def _rollup_insert(where: str = "", params=()) -> None:
    sql = f"INSERT INTO {DailyRollup._meta.db_table} ({_ROLLUP_COLUMNS}) " + _ROLLUP_SELECT.format(
        usage=Usage._meta.db_table, where=where
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _rollups_add(sums: dict[tuple, list[int]]) -> None:
    """Add summed deltas to their rollup rows in one upsert per 500 keys (a row is created
    the first time its key is seen), then drop rows left with no usage."""
    table = DailyRollup._meta.db_table
    columns = [*_ROLLUP_KEY, *_ROLLUP_SUMS, "pieces"]
    adds = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in columns[6:])
    more = ", ".join(f"{name} = {name} + %s" for name in columns[6:])
    # A key that lost usage rows has a negative piece count, which an INSERT may not carry
    # even when it ends in the update (pieces >= 0 is checked first): those are updated alone.
    rows = sorted((key, delta) for key, delta in sums.items() if delta[-1] >= 0)
    fewer = sorted((key, delta) for key, delta in sums.items() if delta[-1] < 0)
    with connection.cursor() as cursor:
        for key, delta in fewer:
            cursor.execute(
                f"UPDATE {table} SET {more} WHERE "  # noqa: S608 - our own table and columns
                + " AND ".join(f"{name} = %s" for name in _ROLLUP_KEY),
                [*delta, *key],
            )
            if cursor.rowcount != 1:
                # Rows leave a key only after they entered it: the rollups are damaged.
                raise RuntimeError(
                    f"No rollup row for {key} to take {-delta[-1]} usage row(s) from; "
                    "run manage.py billing_meter --rebuild-rollups."
                )
        for start in range(0, len(rows), 500):
            chunk = rows[start : start + 500]
            values = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values} "  # noqa: S608
                f"ON CONFLICT ({', '.join(_ROLLUP_KEY)}) "
                f"DO UPDATE SET {adds}",
                [value for key, delta in chunk for value in (*key, *delta)],
            )
    DailyRollup.objects.filter(
        project_id__in={key[1] for key in sums}, day__in={key[0] for key in sums}, pieces=0
    ).delete()


def rollups_refresh(*, batch: int = 10_000) -> int:
    """Add the pending deltas to the rollup rows; return how many (day, project) pairs changed.

    Deltas are taken by DELETE ... RETURNING: only committed ones are seen, and a delta another
    refresh is taking is waited for and then gone, so each is added exactly once; one committed
    meanwhile waits for the next pass. Rollups plus pending deltas always equal the usage rows.
    Against a rebuild, PostgreSQL's table lock orders the two (SQLite has one writer)."""
    changed: set[tuple[date, int]] = set()
    fields = [*_ROLLUP_KEY, *_ROLLUP_SUMS, "pieces"]
    while True:
        with transaction.atomic():
            table = RollupDelta._meta.db_table
            with connection.cursor() as cursor:
                # Taken and deleted in one statement: only deltas committed by now, each once.
                cursor.execute(
                    f"DELETE FROM {table} WHERE id IN "  # noqa: S608 - our own table
                    f"(SELECT id FROM {table} ORDER BY id LIMIT %s) RETURNING {', '.join(fields)}",
                    [batch],
                )
                pending = cursor.fetchall()
            if not pending:
                return len(changed)
            keyed = len(_ROLLUP_KEY)
            sums: dict[tuple, list[int]] = defaultdict(lambda: [0] * (len(_ROLLUP_SUMS) + 1))
            for values in pending:
                total = sums[tuple(values[:keyed])]
                for index, value in enumerate(values[keyed:]):
                    total[index] += value
            _rollups_add(sums)
            changed |= {(key[0], key[1]) for key in sums}


@transaction.atomic
def rollups_rebuild() -> int:
    """Rebuild every rollup row from the usage rows (a repair; passes keep them current)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Metering and refreshes wait on the deltas until the rebuild commits: a delta is
            # then either in the usage read below (and deleted here) or after it (added later).
            cursor.execute(f"LOCK TABLE {RollupDelta._meta.db_table} IN EXCLUSIVE MODE")
        cursor.execute(f"DELETE FROM {RollupDelta._meta.db_table}")  # noqa: S608 - our own table
        cursor.execute(f"DELETE FROM {DailyRollup._meta.db_table}")  # noqa: S608 - our own table
    _rollup_insert()
    count = DailyRollup.objects.count()
    audit_record_system(name="rollups_rebuild", action="rebuild", summary={"rows": count})
    return count


# --- budgets -------------------------------------------------------------------------------------

DEFAULT_POLICY = Budget.Policy.NOTIFY


def _thresholds(value) -> list[int]:
    if not isinstance(value, list | tuple) or not value:
        raise ValidationError(
            {"thresholds": "Give a list of percentages, e.g. [50, 80, 100]."}, code="invalid"
        )
    found = sorted({v for v in value if isinstance(v, int) and not isinstance(v, bool)})
    if len(found) != len(value) or not all(1 <= v <= 1000 for v in found):
        raise ValidationError(
            {"thresholds": "Thresholds are whole percentages from 1 to 1000, each once."},
            code="invalid",
        )
    return found


def budget_set(
    *,
    project: Project,
    actor: User,
    monthly_amount: Decimal | str | None,
    thresholds: list[int] | None = None,
    policy: str | None = None,
) -> Budget | None:
    """Set (or, with no amount, remove) a project's monthly budget.

    Finance and admins set amounts and thresholds; only admins choose what happens at 100 %.
    Takes the project's row lock, so a budget change and an order's budget check never
    interleave.
    """
    if not actor.sees_everything:
        raise Forbidden("Only finance and admins set budgets.")
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=project.pk)
        budget = Budget.objects.filter(project=project).first()
        current_policy = budget.policy if budget else DEFAULT_POLICY
        if policy is not None and policy != current_policy and not actor.is_portal_admin:
            raise Forbidden("Only admins choose what happens when a project's budget is spent.")
        if monthly_amount is None or monthly_amount == "":
            if budget is not None:
                budget.delete()
            return None
        try:
            amount = Decimal(str(monthly_amount))
        except InvalidOperation:
            raise ValidationError(
                {"monthly_amount": "Give an amount in dollars, e.g. 5000 or 1250.50."},
                code="invalid",
            ) from None
        if not amount.is_finite() or amount < 0 or amount != amount.quantize(Decimal("0.01")):
            raise ValidationError(
                {"monthly_amount": "The amount is dollars and cents, 0 or more, e.g. 1250.50."},
                code="invalid",
            )
        budget = budget or Budget(project=project)
        budget.monthly_amount = amount
        if thresholds is not None:
            budget.thresholds = _thresholds(thresholds)
        elif budget.pk is None:
            budget.thresholds = _thresholds(budget.thresholds)
        if policy is not None:
            if policy not in Budget.Policy.values:
                raise ValidationError(
                    {"policy": f"policy accepts {', '.join(Budget.Policy.values)}."},
                    code="invalid_choice",
                )
            budget.policy = policy
        budget.updated_by = actor
        budget.full_clean()
        budget.save()
        _alerts_rearm(budget_status(project))
    return budget


def _alerts_rearm(status: BudgetStatus) -> None:
    """After a budget changes, forget this month's crossings that no longer hold, so that a
    raised budget warns again when its own thresholds are crossed."""
    values = {
        BudgetAlert.Basis.ACTUAL: status.spent_rs,
        BudgetAlert.Basis.FORECAST: status.forecast_rs,
    }
    stale = [
        alert.pk
        for alert in BudgetAlert.objects.filter(project=status.project, month=status.month)
        if not _crossed(values[alert.basis], alert.threshold, status.amount_rs)
    ]
    BudgetAlert.objects.filter(pk__in=stale).delete()


@dataclass
class BudgetCheckReport:
    alerts: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def _crossed(value_rs: int, threshold: int, amount_rs: int) -> bool:
    return value_rs > 0 and value_rs * 100 >= threshold * amount_rs


POLICY_AT_100 = {
    Budget.Policy.NOTIFY: "nothing is blocked (the policy is to notify only)",
    Budget.Policy.BLOCK_ON_DEMAND: "new on-demand orders that do not fit are refused",
    Budget.Policy.BLOCK_ALL: "new orders that do not fit are refused",
    Budget.Policy.STOP_HOSTS: "running hosts are stopped and new orders that do not fit are "
    "refused",
}


def _notify_crossing(status: BudgetStatus, basis: str, threshold: int) -> None:
    project, budget = status.project, status.budget
    month = f"{status.month:%B %Y}"
    if basis == BudgetAlert.Basis.ACTUAL:
        subject = f"{project.slug} has spent {threshold}% of its {month} budget"
    else:
        subject = f"{project.slug} is forecast to spend {threshold}% of its {month} budget"
    body = (
        f"Spent {usd(status.spent_rs)} of {usd(status.amount_rs)} this month; forecast "
        f"{usd(status.forecast_rs)} with the hosts running now kept to the end of their lease or "
        f"the month. At 100 % of the budget {POLICY_AT_100[budget.policy]}."
    )
    managers = User.objects.filter(
        memberships__project=project, memberships__role=Membership.Role.MANAGER, is_active=True
    )
    finance = User.objects.filter(role=User.Role.FINANCE, is_active=True)
    for user in {u.pk: u for u in [*managers, *finance]}.values():
        notice_send(user=user, subject=subject, body=body, link=f"/budgets/#{project.slug}")


def budgets_check(*, now: datetime | None = None) -> BudgetCheckReport:
    """Notify each threshold a project crosses (once a month each, on spend and on forecast),
    and apply the stop-hosts policy to projects whose spend has reached their budget."""
    now = now or timezone.now()
    report = BudgetCheckReport()
    budgets = list(Budget.objects.select_related("project").order_by("project__slug"))
    # Every project's month in a few queries, and the crossings already noted, in one.
    statuses = {s.project.pk: s for s in budget_statuses([b.project for b in budgets], now=now)}
    noted = set(
        BudgetAlert.objects.filter(month=month_of(now)).values_list(
            "project_id", "basis", "threshold"
        )
    )
    for budget in budgets:
        status = statuses[budget.project_id]
        amount = status.amount_rs
        crossings = {
            basis: [
                threshold
                for threshold in sorted(budget.thresholds)
                if (budget.project_id, basis, threshold) not in noted
                and _crossed(value, threshold, amount)
            ]
            for basis, value in (
                (BudgetAlert.Basis.ACTUAL, status.spent_rs),
                (BudgetAlert.Basis.FORECAST, status.forecast_rs),
            )
        }
        stop = budget.policy == Budget.Policy.STOP_HOSTS and _crossed(status.spent_rs, 100, amount)
        if not stop and not any(crossings.values()):
            continue  # nothing new: no transaction, no query
        with transaction.atomic():
            for basis, thresholds in crossings.items():
                value = status.spent_rs if basis == BudgetAlert.Basis.ACTUAL else status.forecast_rs
                new = []
                for threshold in thresholds:
                    _, created = BudgetAlert.objects.get_or_create(
                        project=budget.project,
                        month=month_of(now),
                        basis=basis,
                        threshold=threshold,
                        defaults={"amount_rs": value, "budget_amount": budget.monthly_amount},
                    )
                    if created:
                        new.append(threshold)
                if new:
                    # Several thresholds crossed in one pass make one notice, for the highest.
                    _notify_crossing(status, basis, new[-1])
                    audit_record_system(
                        name="check_budgets",
                        action=f"{basis}-threshold",
                        object_ref=f"portal.project:{budget.project_id}",
                        summary={"thresholds": new, "value": usd(value), "budget": usd(amount)},
                    )
                    report.alerts += [f"{budget.project.slug}:{basis}:{t}" for t in new]
            if stop:
                running = Instance.objects.filter(
                    project=budget.project, status=Instance.Status.RUNNING
                )
                for instance in running:
                    row = instance_system_stop(
                        instance=instance,
                        reason=f"the {budget.project.slug} budget for {status.month:%B %Y} is "
                        "spent (policy: stop running hosts)",
                        actor="system:budget",
                    )
                    if row.status != Instance.Status.RUNNING:
                        report.stopped.append(str(row.pk))
    return report


# --- reconciliation with the cloud bill ----------------------------------------------------------


def cur_import(*, data: bytes, source: str, actor: User | None) -> CurImport:
    """Compare a Cost and Usage Report (CSV, optionally gzipped) with metered usage, host by
    host, and keep the result. Changes nothing the portal bills or runs."""
    if actor is not None and not actor.sees_everything:
        raise Forbidden("Only finance and admins reconcile the cloud bill.")
    report = cur.parse(data)
    comparison = cur.compare(report)
    with transaction.atomic():
        imported = CurImport.objects.create(
            source=source[:500],
            imported_by=actor,
            first_day=comparison.first_day,
            last_day=comparison.last_day,
            lines_read=report.lines_read,
            lines_compared=report.lines_compared,
            summary=comparison.summary(),
        )
        CurResult.objects.bulk_create(
            [
                CurResult(
                    cur_import=imported,
                    resource_id=row.resource_id[:200],
                    tag_instance=row.tag_instance[:100],
                    instance_id=row.instance_id,
                    status=row.status,
                    cloud_cost=row.cloud_cost,
                    portal_cost_rs=row.portal_cost_rs,
                    note=row.note[:300],
                )
                for row in comparison.rows
            ],
            batch_size=1000,
        )
        if actor is None:
            audit_record_system(
                name="cur_import",
                action="import",
                object_ref=f"billing.curimport:{imported.pk}",
                summary={"source": source[:200], **comparison.counts()},
            )
    return imported


def cur_import_s3(*, bucket: str, key: str, actor: User | None) -> CurImport:
    """Fetch a Cost and Usage Report from S3, then import it as cur_import does."""
    if actor is not None and not actor.sees_everything:
        raise Forbidden("Only finance and admins reconcile the cloud bill.")
    return cur_import(
        data=cur.fetch_s3(bucket=bucket, key=key), source=f"s3://{bucket}/{key}", actor=actor
    )
