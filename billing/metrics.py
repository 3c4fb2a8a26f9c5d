"""Billing figures for /metrics, computed at scrape time (registered in BillingConfig.ready())."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone
from prometheus_client.core import Metric

from billing.models import MeterMark
from instances.models import InstanceEvent
from portal.metrics import gauge


def metering_lag_seconds(now=None) -> float:
    """Age of the oldest host event metering has not taken in yet (0 when none waits).

    An event waits while its host's MeterMark has not seen its id; one query, a join on the
    marks' primary key."""
    now = now or timezone.now()
    seen = MeterMark.objects.filter(instance_id=OuterRef("instance_id")).values("last_event_id")
    oldest = (
        InstanceEvent.objects.annotate(seen=Subquery(seen[:1]))
        .filter(Q(seen__isnull=True) | Q(id__gt=F("seen")))
        .order_by("at")
        .values_list("at", flat=True)
        .first()
    )
    return max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


def collect() -> Iterable[Metric]:
    family = gauge(
        "portal_metering_lag_seconds",
        "Seconds since the oldest host event that metering has not taken in yet.",
    )
    family.add_metric([], metering_lag_seconds())
    yield family
