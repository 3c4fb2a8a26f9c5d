"""Cost reports: read from the daily rollups (never the usage rows), rounded once for display.

A report is a date range (UTC days, both ends included), a grouping (project, user, instance
type, GPU model or market), a granularity (day, week from Monday, month) and optional filters.
Its lines are (period, group) pairs with the spend split on-demand / spot, the savings (what
the same seconds would have cost on-demand at the list price, less what they cost) and the
GPU-hours. Figures are rounded once: the total spend first (so it is the figure a budget shows),
shared between on-demand and spot, and each other column's total; then the groups share the
total and each group's periods share the group's figures. On-demand and spot are shared together
(money.allocate_split), so every shown spend and each of its halves lies between the floor and
ceiling of its exact value and equal exact spends show equal amounts (or a cent apart when the
cents left over run out); every shown line adds up to its group and every group to the total.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import cache, cached_property

from django.db.models import F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncMonth, TruncWeek

from audit.lib.csv_stream import csv_lines
from billing.lib.money import (
    GPU_SECONDS_PER_TENTH_HOUR,
    RS_PER_CENT,
    SECONDS_PER_HOUR,
    allocate,
    allocate_split,
    cents_to_decimal,
    gpu_hours_to_decimal,
    round_half_up,
)
from billing.models import DailyRollup, MeterState
from instances.models import InstanceType, Market, Pool
from portal.models import Project, User

GROUPS = {
    "project": "Project",
    "user": "User",
    "instance_type": "Instance type",
    "gpu_model": "GPU model",
    "market": "Market",
    "pool": "Pool",
    "mig_profile": "MIG slice profile",
}
GRANULARITIES = {"day": "Day", "week": "Week", "month": "Month"}
# The days a report may cover. Beyond them the calendar arithmetic (the week or month after the
# last day) leaves what dates can hold, and no host ran before 2000 or will after 2099.
FIRST_DAY = date(2000, 1, 1)
LAST_DAY = date(2099, 12, 31)
_GROUP_FIELD = {
    "project": "project_id",
    "user": "user_id",
    "instance_type": "instance_type_id",
    "gpu_model": "gpu_model",
    "market": "market",
    "pool": "pool_key",
    "mig_profile": "mig_profile",
}


@dataclass(frozen=True)
class ReportQuery:
    """What a report covers; built and checked by billing.forms.ReportForm."""

    start: date
    end: date
    group_by: str = "project"
    granularity: str = "day"
    project: Project | None = None
    user: User | None = None
    instance_type: InstanceType | None = None
    gpu_model: str = ""
    market: str = ""
    pool: Pool | None = None


@dataclass
class Figures:
    """Shown figures of a line, a group or the total (cents and tenths of a GPU-hour)."""

    on_demand_cents: int = 0
    spot_cents: int = 0
    savings_cents: int = 0
    gpu_tenths: int = 0
    exact: Exact = field(default_factory=lambda: Exact())

    @property
    def cost(self) -> Decimal:
        return cents_to_decimal(self.on_demand_cents + self.spot_cents)

    @property
    def on_demand(self) -> Decimal:
        return cents_to_decimal(self.on_demand_cents)

    @property
    def spot(self) -> Decimal:
        return cents_to_decimal(self.spot_cents)

    @property
    def savings(self) -> Decimal:
        return cents_to_decimal(self.savings_cents)

    @property
    def on_demand_equivalent(self) -> Decimal:
        """What the same seconds would have cost on-demand: spend plus savings."""
        return self.cost + self.savings

    @property
    def gpu_hours(self) -> Decimal:
        return gpu_hours_to_decimal(self.gpu_tenths)

    @property
    def spot_percent(self) -> Decimal:
        total = self.on_demand_cents + self.spot_cents
        if not total:
            return Decimal(0)
        return (Decimal(self.spot_cents) * 100 / total).quantize(Decimal("0.1"))

    @property
    def on_demand_percent(self) -> Decimal:
        total = self.on_demand_cents + self.spot_cents
        return Decimal(100) - self.spot_percent if total else Decimal(0)

    @property
    def savings_percent(self) -> Decimal:
        """Savings as a share of the on-demand equivalent."""
        equivalent = self.on_demand_cents + self.spot_cents + self.savings_cents
        if not equivalent:
            return Decimal(0)
        return (Decimal(self.savings_cents) * 100 / equivalent).quantize(Decimal("0.1"))

    @property
    def cost_per_gpu_hour(self) -> Decimal | None:
        if not self.gpu_tenths:
            return None
        cents = self.on_demand_cents + self.spot_cents
        return (Decimal(cents) * 10 / 100 / self.gpu_tenths).quantize(Decimal("0.0001"))


@dataclass
class Line:
    period: date
    key: str
    label: str
    figures: Figures


@dataclass
class Group:
    key: str
    label: str
    figures: Figures
    share: Decimal = Decimal(0)
    lines: list[Line] = field(default_factory=list)


@dataclass
class Report:
    query: ReportQuery
    total: Figures
    groups: list[Group]
    periods: list[tuple[date, Figures]]

    @cached_property
    def lines(self) -> list[Line]:
        """Every (period, group) line in period order (the page reads it several times)."""
        return sorted(
            (line for group in self.groups for line in group.lines),
            key=lambda line: (line.period, line.label),
        )

    @property
    def is_empty(self) -> bool:
        return not self.groups


@dataclass
class Exact:
    """The exact sums behind shown figures: rate-seconds (µ$/h x s) and GPU-seconds."""

    on_demand: int = 0
    spot: int = 0
    savings: int = 0
    gpu_seconds: int = 0

    def add(self, other: Exact) -> None:
        self.on_demand += other.on_demand
        self.spot += other.spot
        self.savings += other.savings
        self.gpu_seconds += other.gpu_seconds

    @property
    def cost(self) -> int:
        return self.on_demand + self.spot

    def micros(self) -> dict[str, int]:
        """Each amount in whole micro-dollars (rate-seconds rounded half up to $0.000001)."""
        on_demand = round_half_up(self.on_demand, SECONDS_PER_HOUR)
        spot = round_half_up(self.spot, SECONDS_PER_HOUR)
        savings = round_half_up(self.savings, SECONDS_PER_HOUR)
        # Each sum rounded once from its exact rate-seconds, not added from rounded parts.
        cost = round_half_up(self.cost, SECONDS_PER_HOUR)
        return {
            "cost": cost,
            "on_demand": on_demand,
            "spot": spot,
            "savings": savings,
            "on_demand_equivalent": round_half_up(self.cost + self.savings, SECONDS_PER_HOUR),
        }


def _summed(parts) -> Exact:
    total = Exact()
    for part in parts:
        total.add(part)
    return total


def period_start(day: date, granularity: str) -> date:
    if granularity == "week":
        return day - timedelta(days=day.weekday())
    if granularity == "month":
        return day.replace(day=1)
    return day


def periods_between(start: date, end: date, granularity: str) -> list[date]:
    found, current = [], period_start(start, granularity)
    while current <= end:
        found.append(current)
        if granularity == "day":
            current += timedelta(days=1)
        elif granularity == "week":
            current += timedelta(days=7)
        else:
            current = date(current.year + (current.month == 12), current.month % 12 + 1, 1)
    return found


def rollups_for(viewer, query: ReportQuery, rows=None):
    """The rollups of the report the viewer may see: ``rows`` (by default every rollup; the
    report passes its aggregate) through ``for_user``, then the range and the filters."""
    if rows is None:
        rows = DailyRollup.objects.all()
    rows = rows.for_user(viewer).filter(day__gte=query.start, day__lte=query.end)
    if query.project is not None:
        rows = rows.filter(project=query.project)
    if query.user is not None:
        rows = rows.filter(user=query.user)
    if query.instance_type is not None:
        rows = rows.filter(instance_type=query.instance_type)
    if query.gpu_model:
        rows = rows.filter(gpu_model=query.gpu_model)
    if query.market:
        rows = rows.filter(market=query.market)
    if query.pool is not None:
        rows = rows.filter(pool_key=str(query.pool.pk))
    return rows


class GroupLabel(Subquery):
    """A group's label read in the report's own query, beside its sums: a subquery on the
    group's key, which the query already groups by, so it is not grouped by itself and runs
    once per group (grouping by it would run it once per rollup row)."""

    def get_group_by_cols(self):
        return []


def _label_query(group_by: str):
    """The label of a group that names a row of another table (its slug, username or type
    name), as a subquery on the rollup's key; None where labels need no lookup or no single
    column holds them (markets, GPU models, pools)."""
    if group_by == "project":
        return GroupLabel(
            Project.objects.filter(pk=OuterRef("project_id")).order_by().values("slug")
        )
    if group_by == "user":
        return GroupLabel(User.objects.filter(pk=OuterRef("user_id")).order_by().values("username"))
    if group_by == "instance_type":
        return GroupLabel(
            InstanceType.objects.filter(pk=OuterRef("instance_type_id")).order_by().values("name")
        )
    return None


def _labels(group_by: str, keys) -> dict:
    """Labels of the groups whose label has no subquery (_label_query)."""
    keys = set(keys)
    if group_by == "market":
        return {key: Market(key).label for key in keys}
    if group_by == "pool":
        pools = Pool.objects.filter(pk__in=[key for key in keys if key]).select_related("project")
        named = {str(pool.pk): f"{pool.project.slug}/{pool.name}" for pool in pools}
        return {key: named.get(key, "no pool") if key else "no pool" for key in keys}
    if group_by == "mig_profile":
        return {key: f"{key} slices" if key else "whole hosts" for key in keys}
    return {key: key for key in keys}


def last_metered_at() -> datetime | None:
    """When the last metering pass began ("metered 3 minutes ago"): the newest of the checkpoints
    MeterState keeps, one row read by its key (not a scan of every host's MeterMark)."""
    checkpoints = (
        MeterState.objects.filter(id=1).values_list("checkpoints", flat=True).first() or []
    )
    if not checkpoints:
        return None
    return max(datetime.fromisoformat(when) for when, _ in checkpoints)


@cache
def _report_sums(group_by: str, granularity: str):
    """The report's aggregate over all the rollups, built once per grouping and granularity and
    never evaluated itself: each report filters a copy of it (rollups_for: for_user, the range,
    the filters; they are plain columns, so they land in WHERE, before the grouping). Building
    it (resolving six aggregates and the label's subquery) took more CPU on every request than
    compiling the SQL that comes out, which is the same either way."""
    trunc = {"day": F("day"), "week": TruncWeek("day"), "month": TruncMonth("day")}
    sums = {
        "on_demand": Sum("cost_rs", filter=~Q(market=Market.SPOT)),
        "spot": Sum("cost_rs", filter=Q(market=Market.SPOT)),
        "list_cost": Sum("list_cost_rs"),
        "cost": Sum("cost_rs"),
        "gpu_seconds": Sum("gpu_seconds"),
    }
    label = _label_query(group_by)
    if label is not None:
        sums["label"] = label
    rows = (
        DailyRollup.objects.values(period=trunc[granularity], key=F(_GROUP_FIELD[group_by]))
        .annotate(**sums)
        .order_by()
    )
    return rows, label is not None


def cost_report(*, viewer, query: ReportQuery) -> Report:
    """The report a viewer may see: one aggregate query over the rollups (the groups' labels
    read in it), then rounding."""
    sums, labelled = _report_sums(query.group_by, query.granularity)
    rows = rollups_for(viewer, query, sums)
    exact: dict[str, dict[date, Exact]] = defaultdict(dict)
    labels = {}
    for row in rows:
        if labelled:
            labels[row["key"]] = row["label"]
        period = row["period"]
        if isinstance(period, datetime):
            period = period.date()
        cost = int(row["cost"] or 0)
        exact[row["key"]].setdefault(period, Exact()).add(
            Exact(
                on_demand=int(row["on_demand"] or 0),
                spot=int(row["spot"] or 0),
                savings=int(row["list_cost"] or 0) - cost,
                gpu_seconds=int(row["gpu_seconds"] or 0),
            )
        )
    return report_round(query, exact, labels if labelled else _labels(query.group_by, exact))


def total_figures(exact: Exact) -> Figures:
    """The total, each column rounded once (half up); the spend first, as a budget shows it,
    then shared between on-demand and spot."""
    spend = round_half_up(exact.cost, RS_PER_CENT)
    on_demand, spot = allocate([exact.on_demand, exact.spot], RS_PER_CENT, total_units=spend)
    return Figures(
        on_demand_cents=on_demand,
        spot_cents=spot,
        savings_cents=round_half_up(exact.savings, RS_PER_CENT),
        gpu_tenths=round_half_up(exact.gpu_seconds, GPU_SECONDS_PER_TENTH_HOUR),
        exact=exact,
    )


def figures_share(parts: list[Exact], whole: Figures) -> list[Figures]:
    """Round the parts (in a stable order, which breaks ties) so that they add up to the whole's
    shown figures, column by column. On-demand and spot are shared together (money.allocate_split),
    so each part's spend and each of its two halves lies between the floor and ceiling of its
    exact value, and equal exact spends get equal shown spends unless the whole leaves fewer
    cents than such parts; savings and GPU-hours by largest remainder (money.allocate)."""
    split = allocate_split(
        [(p.on_demand, p.spot) for p in parts],
        RS_PER_CENT,
        totals=(whole.on_demand_cents, whole.spot_cents),
    )
    savings = allocate([p.savings for p in parts], RS_PER_CENT, total_units=whole.savings_cents)
    gpu = allocate(
        [p.gpu_seconds for p in parts], GPU_SECONDS_PER_TENTH_HOUR, total_units=whole.gpu_tenths
    )
    return [
        Figures(on_demand_cents=o, spot_cents=s, savings_cents=v, gpu_tenths=g, exact=p)
        for p, (o, s), v, g in zip(parts, split, savings, gpu, strict=True)
    ]


def report_round(query: ReportQuery, exact: dict, labels: dict) -> Report:
    """The report from exact sums per group key and period: the total is rounded once, the
    groups share it, and each group's periods share the group's figures, so every shown line
    adds up to its group and every group to the total, in every column."""
    # The stable order that breaks ties: by label (slug, username, type name, value).
    keys = sorted(exact, key=lambda key: (str(labels.get(key, key)), str(key)))
    total = total_figures(_summed(_summed(exact[key].values()) for key in keys))
    shared = figures_share([_summed(exact[key].values()) for key in keys], total)
    groups = []
    for key, figures in zip(keys, shared, strict=True):
        periods = sorted(exact[key])
        label = str(labels.get(key, key))
        # The key callers filter by: a slug, username or type name; the value for GPU and market.
        public = str(key) if query.group_by in ("market", "gpu_model", "mig_profile") else label
        lines = [
            Line(period=period, key=public, label=label, figures=line)
            for period, line in zip(
                periods, figures_share([exact[key][p] for p in periods], figures), strict=True
            )
        ]
        groups.append(Group(key=public, label=label, figures=figures, lines=lines))
    spend = total.on_demand_cents + total.spot_cents
    for group in groups:
        own = group.figures.on_demand_cents + group.figures.spot_cents
        group.share = (Decimal(own) * 100 / spend).quantize(Decimal("0.1")) if spend else Decimal(0)
    groups.sort(key=lambda g: (-(g.figures.on_demand_cents + g.figures.spot_cents), g.label))
    by_period: dict[date, Figures] = {
        p: Figures() for p in periods_between(query.start, query.end, query.granularity)
    }
    for group in groups:
        for line in group.lines:
            sums = by_period.setdefault(line.period, Figures())
            for name in _SHOWN:
                setattr(sums, name, getattr(sums, name) + getattr(line.figures, name))
            sums.exact.add(line.figures.exact)
    return Report(query=query, total=total, groups=groups, periods=sorted(by_period.items()))


_SHOWN = ("on_demand_cents", "spot_cents", "savings_cents", "gpu_tenths")


CSV_HEADER = [
    "period_start",
    "group_by",
    "group",
    "on_demand_usd",
    "spot_usd",
    "cost_usd",
    "savings_usd",
    "on_demand_equivalent_usd",
    "gpu_hours",
]


def csv_rows(report: Report) -> Iterator[str]:
    """The report as CSV lines, one (period, group) per line and a total line; for streaming."""
    return csv_lines(_csv_values(report))


def _csv_values(report: Report) -> Iterator[list]:
    yield CSV_HEADER
    group_by = report.query.group_by
    for line in report.lines:
        f = line.figures
        yield [
            line.period.isoformat(),
            group_by,
            line.label,
            f.on_demand,
            f.spot,
            f.cost,
            f.savings,
            f.on_demand_equivalent,
            f.gpu_hours,
        ]
    t = report.total
    yield [
        "total",
        group_by,
        f"{report.query.start.isoformat()} to {report.query.end.isoformat()}",
        t.on_demand,
        t.spot,
        t.cost,
        t.savings,
        t.on_demand_equivalent,
        t.gpu_hours,
    ]
