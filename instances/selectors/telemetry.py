"""instances/selectors/telemetry.py: reads of GPU telemetry that several callers share: each
running host's current reading, how far back a host's readings reach, and a host's series
(hours, then minutes) for its chart."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from instances.models import GpuHourlyReading, GpuReading, Instance

FIELDS = ("instance_id", "minute", "utilization", "memory_used_mib")


def latest_gpu_readings(instance_ids, *, now: datetime, with_gpus: bool = False) -> dict:
    """Each running host's current GPU reading (its newest, if no older than
    PORTAL_TELEMETRY_FRESH_MINUTES), by instance id: one query for a whole list. A host that
    is not running has no GPU "now", however fresh its last minute is. ``with_gpus`` adds
    ``gpus``, each GPU's own reading in that minute ([index, utilization, memory used, memory
    total]; empty from an agent that sends only the totals): the host page shows it, the lists
    that poll every few seconds do not read it."""
    fresh_after = now - timedelta(minutes=settings.PORTAL_TELEMETRY_FRESH_MINUTES)
    rows = (
        GpuReading.objects.filter(
            instance_id__in=list(instance_ids),
            instance__status=Instance.Status.RUNNING,
            minute__gte=fresh_after,
        )
        .order_by("instance_id", "-minute")
        .values(*FIELDS, *(("gpus",) if with_gpus else ()))
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
    """Each GPU that reported in ``series`` (gpu_series), by index: its utilization and memory
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
