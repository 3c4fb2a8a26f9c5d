"""Writers for billing data (DESIGN rule 1)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Max

from audit.services import audit_record_system
from billing.models import SpotPrice
from instances.models import InstanceType
from instances.providers import get_provider
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
