"""Instance figures for /metrics: hosts by status, market and type (scrape time, one query),
provisioning time, order outcomes and reconcile actions (counted as they happen); cloud
calls are counted in instances/providers/counted.py.

Named in PORTAL_METRICS_COLLECTORS, so portal/metrics.py never imports this app.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import Count
from prometheus_client.core import Metric

from instances.models import Instance
from portal.metrics import (
    ORDERS,
    PROVISION_SECONDS,
    RECONCILE_ACTIONS,
    gauge,
)


def collect_hosts() -> Iterable[Metric]:
    """Hosts by status, market and instance type, in one grouped query."""
    family = gauge(
        "portal_hosts",
        "Hosts the portal knows, by status, market and instance type.",
        ["status", "market", "instance_type"],
    )
    rows = (
        Instance.objects.order_by()
        .values_list("status", "market", "instance_type__name")
        .annotate(n=Count("id"))
    )
    for status, market, type_name, count in rows:
        family.add_metric([status, market, type_name], count)
    yield family


def order_counted(outcome: str) -> None:
    """An order's outcome, counted once its transaction commits (a rollback counts nothing)."""
    transaction.on_commit(lambda: ORDERS.labels(outcome).inc())


def provisioning_observed(instance: Instance) -> None:
    """Seconds from the host's row (made when its order was placed or approved) to running."""
    seconds = max((instance.status_changed_at - instance.created_at).total_seconds(), 0)
    labels = (instance.instance_type.name, instance.market)
    transaction.on_commit(lambda: PROVISION_SECONDS.labels(*labels).observe(seconds))


def reconcile_counted(report) -> None:
    """What one reconcile pass did, by kind (the fields of ReconcileReport)."""
    for kind, done in vars(report).items():
        if done:
            RECONCILE_ACTIONS.labels(kind).inc(len(done))
