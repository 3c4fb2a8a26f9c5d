"""Reads of orders and hosts that several callers share (services write; selectors read)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from instances.models import GpuHourlyReading, GpuReading, Instance, Order
from portal import permissions


def orders_to_decide(user) -> QuerySet:
    """Held orders this person may decide: every project's for admins, their projects' for
    managers, never their own."""
    if not permissions.can_order(user):
        return Order.objects.none()
    return (
        Order.objects.filter(status=Order.Status.PENDING_APPROVAL)
        .filter(permissions.decidable_projects_q(user))
        .exclude(requester=user)
    )


def orders_to_decide_count(user) -> int:
    """The PORTAL_APPROVALS_WAITING hook: the number on the Approvals link."""
    return orders_to_decide(user).count()


def instance_load(instance_id) -> Instance:
    """One host with what its pages and its worker read (Instance.objects.with_detail())."""
    return Instance.objects.with_detail().get(pk=instance_id)


def hosts_named(user, ids) -> list[Instance] | None:
    """The hosts a bulk action names, by name, if the user sees every one of them; None when
    one is not a host they see (the caller answers 404 without saying which)."""
    hosts = list(
        Instance.objects.for_user(user)
        .filter(pk__in=ids)
        .select_related("instance_type", "project")
        .distinct()
    )
    if len(hosts) < len(set(ids)):
        return None
    return sorted(hosts, key=lambda host: host.name)


def held_orders(user, *, mine: bool = True) -> list[dict]:
    """Orders waiting for approval that this person may see (``mine``: that they placed), the
    oldest first, each with who may decide it and whether this person may cancel it. One query
    for the orders and one per project for its deciders."""
    rows = (
        Order.objects.for_user(user)
        .filter(status=Order.Status.PENDING_APPROVAL)
        .select_related("project", "instance_type", "requester")
        .order_by("created_at")
        .distinct()
    )
    if mine:
        rows = rows.filter(requester=user)
    deciders: dict[int, list[str]] = {}
    managed = permissions.managed_project_ids(user)
    held = []
    for order in rows[:100]:
        if order.project_id not in deciders:
            deciders[order.project_id] = sorted(
                permissions.approvers_of(order.project).values_list("username", flat=True)
            )
        held.append(
            {
                "o": order,
                "deciders": [
                    name for name in deciders[order.project_id] if name != order.requester.username
                ],
                "can_cancel": permissions.can_cancel_order(user, order, managed),
            }
        )
    return held


def latest_gpu_readings(instance_ids, *, now: datetime) -> dict:
    """Each running host's current GPU reading (its newest, if no older than
    PORTAL_TELEMETRY_FRESH_MINUTES), by instance id: one query for a whole list. A host that
    is not running has no GPU "now", however fresh its last minute is."""
    fresh_after = now - timedelta(minutes=settings.PORTAL_TELEMETRY_FRESH_MINUTES)
    rows = (
        GpuReading.objects.filter(
            instance_id__in=list(instance_ids),
            instance__status=Instance.Status.RUNNING,
            minute__gte=fresh_after,
        )
        .order_by("instance_id", "-minute")
        .values("instance_id", "minute", "utilization", "memory_used_mib")
    )
    latest: dict = {}
    for row in rows:
        latest.setdefault(row["instance_id"], row)
    return latest


def gpu_first_reading_at(instance: Instance, *, since: datetime) -> datetime | None:
    """When the host's oldest reading (an hour or a minute) from ``since`` on was taken: how
    far back its chart really reaches."""
    hour = (
        GpuHourlyReading.objects.filter(instance=instance, hour__gte=since)
        .order_by("hour")
        .values_list("hour", flat=True)
        .first()
    )
    minute = (
        GpuReading.objects.filter(instance=instance, minute__gte=since)
        .order_by("minute")
        .values_list("minute", flat=True)
        .first()
    )
    return min((at for at in (hour, minute) if at is not None), default=None)


def gpu_series(instance: Instance, *, since: datetime, until: datetime) -> list[dict]:
    """A host's readings from ``since`` to ``until``, oldest first: hourly summaries where the
    minutes were folded away, then minutes. Each point's ``gpus`` holds its per-GPU values as
    stored ([index, utilization, ..., memory used, memory total]; empty without them), for
    gpu_columns."""
    minutes = list(
        GpuReading.objects.filter(instance=instance, minute__gte=since, minute__lte=until)
        .order_by("minute")
        .values("minute", "utilization", "memory_used_mib", "gpus")
    )
    first_minute = minutes[0]["minute"] if minutes else until
    hours = GpuHourlyReading.objects.filter(
        instance=instance, hour__gte=since, hour__lt=first_minute
    ).order_by("hour")
    series = [
        {
            "at": hour.hour,
            "resolution": "hour",
            "utilization": hour.utilization,
            "memory_used_mib": hour.memory_used_mib,
            # An hour's GPU: [index, mean, peak, most memory, total] -> as a minute's.
            "gpus": [[index, mean, used, total] for index, mean, _, used, total in hour.gpus],
        }
        for hour in hours
    ]
    series += [
        {
            "at": row["minute"],
            "resolution": "minute",
            "utilization": row["utilization"],
            "memory_used_mib": row["memory_used_mib"],
            "gpus": row["gpus"],
        }
        for row in minutes
    ]
    return series


def gpu_columns(series: list[dict]) -> list[dict]:
    """Each GPU that reported in ``series`` (gpu_series), by index: its utilisation and memory
    in use at every point (None where that point has no value for it) and its newest memory
    total. Columns, not a list per point: eight GPUs over a day are 23,000 numbers, and the
    host page fetches them every minute."""
    columns: dict[int, dict] = {}
    for position, point in enumerate(series):
        for index, utilization, used, total in point["gpus"]:
            column = columns.get(index)
            if column is None:
                column = columns[index] = {
                    "index": index,
                    "utilization": [None] * len(series),
                    "memory_used_mib": [None] * len(series),
                }
            column["utilization"][position] = utilization
            column["memory_used_mib"][position] = used
            column["memory_total_mib"] = total
    return [columns[index] for index in sorted(columns)]
