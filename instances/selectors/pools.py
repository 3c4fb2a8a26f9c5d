"""instances/selectors/pools.py: what the pool pages read: each pool's hosts counted by state,
its last event, and the samples of its chart. A fixed number of queries however many pools a
page shows."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery

from instances.models import Instance, Market, Pool, PoolEvent, PoolSample
from instances.services.pools.plan import PENDING

CHART_HOURS = 24


def with_last_event(pools):
    """Pools annotated with their newest event's message, kind and time."""
    newest = PoolEvent.objects.filter(pool=OuterRef("pk")).order_by("-at", "-id")
    return pools.annotate(
        last_event_message=Subquery(newest.values("message")[:1]),
        last_event_kind=Subquery(newest.values("kind")[:1]),
        last_event_at=Subquery(newest.values("at")[:1]),
    )


def instance_counts(pool_ids) -> dict:
    """{pool id: {"on_demand": n, "spot": n, "running": n, "pending": n}} for live hosts."""
    counts: dict = defaultdict(lambda: {"on_demand": 0, "spot": 0, "running": 0, "pending": 0})
    rows = (
        Instance.objects.filter(pool_id__in=list(pool_ids), status__in=Instance.LIVE)
        .values("pool_id", "status", "market")
        .annotate(n=Count("id"))
    )
    for row in rows:
        mine = counts[row["pool_id"]]
        if row["status"] == Instance.Status.RUNNING:
            mine["running"] += row["n"]
            mine["spot" if row["market"] == Market.SPOT else "on_demand"] += row["n"]
        elif row["status"] in PENDING:
            mine["pending"] += row["n"]
    return counts


def pools_overview(user) -> list[dict]:
    """The pools the user sees that are not over, with their counts and last event."""
    pools = list(
        with_last_event(Pool.objects.for_user(user).live())
        .select_related("project", "instance_type", "created_by")
        .order_by("project__slug", "name")
    )
    counts = instance_counts([p.pk for p in pools])
    return [{"p": pool, "n": counts[pool.pk]} for pool in pools]


def chart_series(pool: Pool, *, now: datetime, hours: int = CHART_HOURS) -> dict:
    """The pool's samples of the last ``hours``, as lists for the chart (oldest first), and
    the window they are drawn in (``from``, ``to``): the axis spans the whole window, so a
    gap where no pass ran shows as a gap."""
    since = now - timedelta(hours=hours)
    rows = PoolSample.objects.filter(pool=pool, at__gte=since).order_by("at")
    points = list(
        rows.values_list("at", "desired", "running_on_demand", "running_spot", "quota_hosts")
    )
    return {
        "from": since.isoformat(),
        "to": now.isoformat(),
        "at": [at.isoformat() for at, *_ in points],
        "desired": [p[1] for p in points],
        "on_demand": [p[2] for p in points],
        "spot": [p[3] for p in points],
        "quota": [p[4] for p in points],
        "min_size": pool.min_size,
        "max_size": pool.max_size,
        # Samples further apart than three passes, and at least 15 minutes, leave a gap in the
        # lines: the autoscaler was paused, not holding a count.
        "gap_seconds": max(3 * settings.PORTAL_AUTOSCALE_SECONDS, 900),
    }
