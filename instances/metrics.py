"""Instance figures for /metrics: hosts by status, market and type, and each pool's sizes,
hosts and refusal streak (scrape time, three queries whatever the number of hosts and pools);
provisioning time, order outcomes, reconcile actions and what autoscaler passes did (counted as
they happen); cloud calls are counted in instances/providers/counted.py.

Registered in InstancesConfig.ready() (audit/registry.py), so portal/metrics.py never imports
this app.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import Count
from prometheus_client.core import Metric

from instances.models import Instance, Pool
from portal.metrics import (
    AUTOSCALER_HOSTS,
    AUTOSCALER_REFUSALS,
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


def collect_pools() -> Iterable[Metric]:
    """Each live pool (labelled project and pool name, unique among live pools): its desired
    and max sizes, its hosts by market and status, and how many scale-outs in a row a limit
    has held back (0 when none: alert on > 0)."""
    labels = ["project", "pool"]
    desired = gauge("portal_pool_desired_hosts", "A pool's desired host count.", labels)
    largest = gauge("portal_pool_max_hosts", "A pool's max_size.", labels)
    streak = gauge(
        "portal_pool_refusal_streak",
        "Scale-outs in a row that a quota or budget held back; 0 when the pool is not held.",
        labels,
    )
    hosts = gauge(
        "portal_pool_hosts",
        "A pool's live hosts, by market and status.",
        [*labels, "market", "status"],
    )
    pools = {}
    for pk, project, name, want, most, refused in Pool.objects.live().values_list(
        "pk", "project__slug", "name", "desired", "max_size", "refusal_streak"
    ):
        pools[pk] = [project, name]
        desired.add_metric(pools[pk], want)
        largest.add_metric(pools[pk], most)
        streak.add_metric(pools[pk], refused)
    rows = (
        Instance.objects.filter(pool_id__in=list(pools), status__in=Instance.LIVE)
        .order_by()
        .values_list("pool_id", "market", "status")
        .annotate(n=Count("id"))
    )
    for pool_id, market, status, count in rows:
        hosts.add_metric([*pools[pool_id], market, status], count)
    yield from (desired, largest, streak, hosts)


def autoscale_counted(report) -> None:
    """What one autoscaler pass did (its report's counts): hosts launched and ended by market,
    refusals by limit."""
    for (action, label), n in report.counts.items():
        if action == "held":
            AUTOSCALER_REFUSALS.labels(label).inc(n)
        else:
            AUTOSCALER_HOSTS.labels(action, label).inc(n)


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
