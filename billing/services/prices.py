"""Prices: the spot and list price histories, and the rate a host pays at each second.

Spot prices come from the provider (``spot_prices_refresh``, a beat task). A list price enters
the history when the catalog changes it (``list_price_record``, the price_changed piece the
catalog's writers run) and at each metering pass (``list_prices_snapshot`` catches a
price changed by a bulk update, which runs no hook). ``RateHistories`` reads both for any
number of hosts in a fixed number of queries and gives each host its charged and list rates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import Case, F, Max, OuterRef, Q, Subquery, Value, When, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from audit.services import audit_record_system
from billing.lib.money import micros
from billing.lib.rules import RateSeries, whole_second
from billing.models import ListPrice, SpotPrice
from instances.models import Instance, InstanceType, Market
from instances.providers import get_provider
from instances.selectors.mig import slice_rate
from instances.services import instance_type_record_spot_price


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


def _list_source(instance_type: InstanceType) -> str:
    source = instance_type.price_source or "catalog"
    if instance_type.price_as_of:
        source = f"{source} (as of {instance_type.price_as_of:%Y-%m-%d})"
    return source[:300]


@transaction.atomic
def list_price_record(*, instance_type: InstanceType, at: datetime | None = None) -> bool:
    """Record the type's list price in the history if it differs from the one in force.

    The price_changed piece (billing/apps.py): the catalog's writers (sync, the admin) run it
    after they change a type's price, in their transaction.
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
    ListPrice.objects.update_or_create(
        instance_type=instance_type,
        at=at,  # two changes within one second: the last one stands for that second
        defaults={"price_per_hour": price, "source": _list_source(instance_type)},
    )
    return True


def list_prices_snapshot(*, at: datetime | None = None) -> int:
    """Record every type whose list price is not the one in force in the history.

    Two queries whatever the catalog: the types beside their newest recorded price, then one
    upsert of those that differ (two changes within one second: the last one stands).
    """
    at = whole_second(at or timezone.now())
    newest = ListPrice.objects.filter(instance_type=OuterRef("pk")).order_by("-at")
    types = InstanceType.objects.annotate(
        listed_price=Subquery(newest.values("price_per_hour")[:1]),
        listed_at=Subquery(newest.values("at")[:1]),
    ).order_by("pk")
    stale = [
        ListPrice(
            instance_type=row,
            at=at,
            price_per_hour=row.on_demand_price_per_hour,
            source=_list_source(row),
        )
        for row in types
        if row.listed_at is None
        or (row.listed_price != row.on_demand_price_per_hour and row.listed_at <= at)
    ]
    if stale:
        ListPrice.objects.bulk_create(
            stale,
            update_conflicts=True,
            unique_fields=["instance_type", "at"],
            update_fields=["price_per_hour", "source"],
        )
    return len(stale)


# Spans of time one history read asks for, per type and region, at most: beyond, the shortest
# gaps between the hosts' windows are read too (a bounded query for any number of hosts).
MAX_SPANS = 64


def spans_of(
    windows: Iterable[tuple[datetime, datetime]], limit: int = MAX_SPANS
) -> list[tuple[datetime, datetime]]:
    """The stretches of time some window covers, in order: overlapping or touching windows
    joined, and beyond ``limit`` spans the shortest gaps closed."""
    spans: list[tuple[datetime, datetime]] = []
    for start, end in sorted(windows):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    if len(spans) > limit:
        by_size = sorted(range(1, len(spans)), key=lambda i: spans[i][0] - spans[i - 1][1])
        closed = set(by_size[: len(spans) - limit])
        joined: list[tuple[datetime, datetime]] = []
        for index, span in enumerate(spans):
            if index in closed:
                joined[-1] = (joined[-1][0], span[1])
            else:
                joined.append(span)
        spans = joined
    return spans


def share_micros(instance: Instance, host_micros: int) -> int:
    """What ``instance`` pays an hour when a whole host of its type pays ``host_micros``: all
    of it for a host; a slice its order's share of one GPU (instances.selectors.mig.slice_rate);
    a shared MIG host nothing, since its slices pay for it (its order loaded)."""
    order = instance.order
    if order.mig_host:
        return 0
    if order.mig_profile_id is None:
        return host_micros
    rate = slice_rate(
        Decimal(host_micros).scaleb(-6), instance.instance_type.gpu_count, order.mig_price_share
    )
    return micros(rate)


def _shared(instance: Instance, rates: RateSeries, *, quoted: bool = False) -> RateSeries:
    """A host's rate history as ``instance`` pays it (share_micros); ``quoted``: the rate before
    the first point is the order's quote, which is already the instance's own."""
    if not instance.order.mig_host and instance.order.mig_profile_id is None:
        return rates
    return RateSeries(
        [(at, share_micros(instance, rate)) for at, rate in rates.points],
        before_first=(
            rates.before_first
            if quoted and not instance.order.mig_host
            else share_micros(instance, rates.before_first)
        ),
    )


class RateHistories:
    """The price histories that a set of hosts needs over their windows, read at once.

    ``windows`` are (host, start, end), the host with its type and order loaded. At most four
    queries whatever the number of hosts and prices: every list price of their types; and, for
    spot hosts, which zones have prices, the price in force when each stretch of time their
    windows cover opens, and the prices inside it (only the hosts' own times: a page with a
    host of last month and one of today reads neither the weeks between nor their prices).
    ``series`` then answers each host as metering always did:
    the zone's prices if its zone has any, else the region-wide ones (no zone), else all the
    region's; before the first price seen, the price quoted at order time.
    """

    def __init__(self, windows: Iterable[tuple[Instance, datetime, datetime]]) -> None:
        windows = list(windows)
        self._list: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
        types = {instance.instance_type_id for instance, _, _ in windows}
        if types:
            rows = ListPrice.objects.filter(instance_type_id__in=types).order_by("at")
            for type_id, at, price in rows.values_list("instance_type_id", "at", "price_per_hour"):
                self._list[type_id].append((at, micros(price)))
        ranges: dict[tuple[int, str], list[tuple[datetime, datetime]]] = defaultdict(list)
        for instance, start, end in windows:
            if instance.market == Market.SPOT:
                ranges[(instance.instance_type_id, instance.region)].append((start, end))
        self._zones: dict[tuple[int, str], set[str]] = defaultdict(set)
        # (type, region, zone) -> [(at, µ$/h)] in time order: the price in force when each of
        # the hosts' stretches of time opens, then every price inside it.
        self._spot: dict[tuple[int, str, str], list[tuple[datetime, int]]] = defaultdict(list)
        if not ranges:
            return
        spans = {key: spans_of(found) for key, found in ranges.items()}
        pairs = [Q(instance_type_id=type_id, region=region) for type_id, region in spans]
        observed = SpotPrice.objects.filter(reduce(or_, pairs))
        columns = ("instance_type_id", "region", "availability_zone")
        # order_by(): the model's ordering would add ``at`` to the DISTINCT (every price
        # row, 34,564 on the demo, instead of the few zones).
        for type_id, region, zone in observed.order_by().values_list(*columns).distinct():
            self._zones[(type_id, region)].add(zone)
        # The price in force when a span opens is the newest one in the gap before it (up to
        # and including its start); none there, and the one in force is one already read (in
        # or before the span before). Each gap is numbered so that one window picks them all.
        gaps = []
        for (type_id, region), found in spans.items():
            since = None
            for low, high in found:
                bounds = {"at__lte": low} if since is None else {"at__gte": since, "at__lte": low}
                gaps.append(Q(instance_type_id=type_id, region=region, **bounds))
                since = high
        gap = Case(*(When(where, then=Value(number)) for number, where in enumerate(gaps)))
        opening = SpotPrice.objects.filter(reduce(or_, gaps)).annotate(
            newest=Window(
                RowNumber(),
                partition_by=[*(F(name) for name in columns), gap],
                order_by=F("at").desc(),
            )
        )
        inside = SpotPrice.objects.filter(
            reduce(
                or_,
                (
                    Q(instance_type_id=type_id, region=region, at__gt=low, at__lt=high)
                    for (type_id, region), found in spans.items()
                    for low, high in found
                ),
            )
        )
        found = [
            *opening.filter(newest=1).values_list(*columns, "at", "price_per_hour"),
            *inside.values_list(*columns, "at", "price_per_hour"),
        ]
        for type_id, region, zone, at, price in sorted(found, key=lambda row: row[3]):
            self._spot[(type_id, region, zone)].append((at, micros(price)))

    def series(
        self, instance: Instance, start: datetime, end: datetime
    ) -> tuple[RateSeries, RateSeries]:
        """The charged rate and the list rate of a host over [start, end]."""
        kind = instance.instance_type
        list_points = self._list.get(kind.pk, [])
        # Before the history began, the first price it knows (or today's, if it knows none).
        first_list = list_points[0][1] if list_points else micros(kind.on_demand_price_per_hour)
        list_rates = _shared(instance, RateSeries(list_points, before_first=first_list))
        if instance.market != Market.SPOT:
            return list_rates, list_rates
        zones = self._zones.get((kind.pk, instance.region), set())
        zone = instance.availability_zone
        if zone and zone in zones:
            zones = {zone}
        elif "" in zones:
            zones = {""}
        prices = sorted(
            point
            for name in zones
            for point in self._spot.get((kind.pk, instance.region, name), [])
        )
        in_force = max((point for point in prices if point[0] <= start), default=None)
        points = [in_force] if in_force else []
        points += [point for point in prices if start < point[0] < end]
        spot = RateSeries(points, before_first=micros(instance.order.quoted_price_per_hour))
        return _shared(instance, spot, quoted=True), list_rates
