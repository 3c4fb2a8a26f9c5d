"""Audit figures for /metrics, computed at scrape time (registered in AuditConfig.ready())."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import BigIntegerField, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from audit.models import AuditChainLink, AuditEvent


def seal_lag_seconds(now=None) -> float:
    """Age of the oldest audit row the chain has not sealed yet (0 when all are sealed).

    One query: rows past the newest link's sequence number, oldest first."""
    now = now or timezone.now()
    newest = AuditChainLink.objects.order_by("-event_seq").values("event_seq")[:1]
    oldest = (
        AuditEvent.objects.filter(
            seq__gt=Coalesce(Subquery(newest), Value(0), output_field=BigIntegerField())
        )
        .order_by("seq")
        .values_list("time", flat=True)
        .first()
    )
    return max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


def collect() -> Iterable[Metric]:
    family = GaugeMetricFamily(
        "portal_audit_seal_lag_seconds",
        "Seconds since the oldest audit row the hash chain has not sealed yet.",
    )
    family.add_metric([], seal_lag_seconds())
    yield family
