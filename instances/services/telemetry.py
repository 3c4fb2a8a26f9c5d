"""GPU telemetry: readings in (from the simulated cloud, or posted by each host's agent), kept
per minute for a retention period and then per hour, and the agents' credentials.

Ingest is one pass with a fixed number of queries however many hosts report: one read of the
hosts that may report, one upsert of the readings (tests/bench/bench_telemetry.py measures it).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max
from django.db.models.functions import TruncHour
from django.utils import timezone

from instances.models import GpuHourlyReading, GpuReading, HostAgentCredential, Instance
from instances.providers import get_provider
from instances.providers.base import GpuValue

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
# Hosts whose readings count: a host reports while it runs, and its last minutes may arrive
# just after it began stopping.
REPORTING = frozenset({Instance.Status.RUNNING, Instance.Status.STOPPING})
AGENT_PREFIX = "gpa_"


@dataclass(frozen=True)
class Reading:
    """One minute of one host, as it arrives (the minute is floored when stored). ``gpus``:
    each GPU's values, when the sender gives them (an older agent sends only the totals)."""

    instance_id: str
    at: datetime
    utilization: int
    memory_used_mib: int
    gpus: tuple[GpuValue, ...] = ()


class Problem(NamedTuple):
    """Why a reading cannot be stored: a machine-readable code and a sentence."""

    code: str
    sentence: str


@dataclass(frozen=True)
class GpuShape:
    """What a host's type says its GPUs are: how many, and each one's memory (GiB)."""

    count: int
    memory_gib: int


@dataclass
class IngestReport:
    """What a pass stored and what it refused, each refusal with its reason: nothing is
    dropped without a word."""

    stored: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def reading_problem(
    reading: Reading, *, now: datetime, shape: GpuShape | None = None
) -> Problem | None:
    """Why a reading cannot be stored (None when it can). With the host's ``shape``, each
    GPU's values are held to it as well."""
    if not 0 <= reading.utilization <= 100:
        return Problem("utilization_out_of_range", "utilization must be a percentage, 0 to 100")
    if reading.memory_used_mib < 0:
        return Problem("memory_negative", "memory_used_mib must not be negative")
    skew = settings.PORTAL_TELEMETRY_MAX_SKEW_SECONDS
    if reading.at > now + timedelta(seconds=skew):
        return Problem(
            "too_far_ahead",
            f"the timestamp is more than {skew} s ahead of the portal's clock; fix the host's "
            "clock (NTP)",
        )
    retention = settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS
    if reading.at < now - timedelta(hours=retention):
        return Problem(
            "too_old",
            f"the timestamp is older than {retention} h, past the minute readings the portal keeps",
        )
    if reading.gpus and shape is not None:
        return gpus_problem(reading, shape)
    return None


def gpus_problem(reading: Reading, shape: GpuShape) -> Problem | None:
    """Each GPU's values against the host's type, and the host's totals against them: the
    totals are the GPUs' mean utilization (either way of rounding it) and their memory summed,
    so the chart's mean line and its GPU lines never disagree."""
    gpus = reading.gpus
    if len(gpus) > shape.count:
        return Problem(
            "too_many_gpus",
            f"gpus lists {len(gpus)} GPUs; this host has {shape.count}",
        )
    indexes = [gpu.index for gpu in gpus]
    if len(set(indexes)) < len(indexes):
        twice = sorted({index for index in indexes if indexes.count(index) > 1})
        return Problem("gpu_index_repeated", f"GPU {twice[0]} is listed more than once")
    top_mib = (shape.memory_gib + 1) * 1024
    for gpu in gpus:
        if not 0 <= gpu.index < shape.count:
            return Problem(
                "gpu_index_out_of_range",
                f"GPU index {gpu.index} is out of range; this host's GPUs are 0 to "
                f"{shape.count - 1}",
            )
        if not 0 <= gpu.utilization <= 100:
            return Problem(
                "utilization_out_of_range",
                f"GPU {gpu.index}: utilization must be a percentage, 0 to 100",
            )
        if not 0 < gpu.memory_total_mib <= top_mib:
            # The catalog's GiB are whole: a GiB over them is rounding, more is another GPU.
            return Problem(
                "gpu_memory_total_out_of_range",
                f"GPU {gpu.index}: memory_total_mib {gpu.memory_total_mib} is not this host's "
                f"GPU memory ({shape.memory_gib} GiB each, {top_mib} MiB at most)",
            )
        if not 0 <= gpu.memory_used_mib <= gpu.memory_total_mib:
            return Problem(
                "gpu_memory_over_total",
                f"GPU {gpu.index}: memory_used_mib {gpu.memory_used_mib} must be between 0 and "
                f"its memory_total_mib {gpu.memory_total_mib}",
            )
    used = sum(gpu.memory_used_mib for gpu in gpus)
    if reading.memory_used_mib != used:
        return Problem(
            "memory_disagrees",
            f"memory_used_mib {reading.memory_used_mib} is not the GPUs' memory summed ({used})",
        )
    busy = sum(gpu.utilization for gpu in gpus)
    # |utilization - mean| < 1, in whole numbers: the mean rounded down or up.
    if abs(reading.utilization * len(gpus) - busy) >= len(gpus):
        mean = busy / len(gpus)
        return Problem(
            "utilization_disagrees",
            f"utilization {reading.utilization} is not the GPUs' mean ({mean:g}, rounded)",
        )
    return None


def readings_ingest(readings: list[Reading], *, now: datetime | None = None) -> IngestReport:
    """Store a minute (or a batch) of readings: a reading slightly ahead of the clock is clamped
    to now, one too far ahead or too old is refused, a host that is not running is refused; a
    repeated minute replaces the earlier reading. Two queries, however many readings."""
    now = now or timezone.now()
    report = IngestReport()
    ids = {reading.instance_id for reading in readings}
    reporting = {
        str(pk): GpuShape(count, memory_gib)
        for pk, count, memory_gib in Instance.objects.filter(
            pk__in=ids, status__in=REPORTING
        ).values_list("pk", "instance_type__gpu_count", "instance_type__gpu_memory_gib")
    }
    rows: dict[tuple[str, datetime], GpuReading] = {}
    for index, reading in enumerate(readings):
        shape = reporting.get(str(reading.instance_id))
        problem = reading_problem(reading, now=now, shape=shape)
        if not problem and shape is None:
            problem = Problem("host_not_running", "the host is not running")
        if problem:
            report.refused.append((index, problem.sentence))
            continue
        minute = _minute(min(reading.at, now))
        # The last of two readings of one minute wins, as a repeated post does.
        rows[(str(reading.instance_id), minute)] = GpuReading(
            instance_id=reading.instance_id,
            minute=minute,
            utilization=reading.utilization,
            memory_used_mib=reading.memory_used_mib,
            gpus=[list(gpu) for gpu in sorted(reading.gpus)],
        )
    if rows:
        GpuReading.objects.bulk_create(
            rows.values(),
            update_conflicts=True,
            unique_fields=["instance", "minute"],
            update_fields=["utilization", "memory_used_mib", "gpus"],
        )
    report.stored = len(rows)
    if report.refused:
        log.warning("telemetry: refused %s of %s readings", len(report.refused), len(readings))
    return report


def telemetry_collect(*, now: datetime | None = None) -> IngestReport:
    """Ask the cloud for this minute's readings, where the cloud reports them (the simulated
    one); on EC2 the hosts' agents post theirs and there is nothing to ask."""
    now = now or timezone.now()
    provider = get_provider()
    if not provider.reports_gpu_readings:
        return IngestReport()
    minute = _minute(now)
    samples = provider.gpu_readings(minute)
    hosts = Instance.objects.filter(cloud_id__in=list(samples), status__in=REPORTING).values_list(
        "pk", "cloud_id"
    )
    readings = [
        Reading(
            instance_id=str(pk),
            at=minute,
            utilization=samples[cloud_id].utilization,
            memory_used_mib=samples[cloud_id].memory_used_mib,
            gpus=samples[cloud_id].gpus,
        )
        for pk, cloud_id in hosts
    ]
    return readings_ingest(readings, now=now)


def telemetry_compact(*, now: datetime | None = None) -> int:
    """Fold minute readings past the retention period into hourly ones and delete them. Whole
    hours only, so a pass never splits one;
    safe to run twice (the hourly rows are upserted from every minute still there). Each GPU's
    hour is folded too (hourly_gpus), from the minutes that carried per-GPU values."""
    now = now or timezone.now()
    retention = timedelta(hours=settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS)
    cutoff = (now - retention).replace(minute=0, second=0, microsecond=0)
    old = GpuReading.objects.filter(minute__lt=cutoff)
    hours = (
        old.annotate(hour=TruncHour("minute"))
        .values("instance_id", "hour")
        .annotate(
            mean=Avg("utilization"),
            peak=Max("utilization"),
            memory=Max("memory_used_mib"),
            minutes=Count("id"),
        )
    )
    by_gpu = hourly_gpus(
        old.exclude(gpus=[]).order_by().values_list("instance_id", "minute", "gpus")
    )
    rows = [
        GpuHourlyReading(
            instance_id=row["instance_id"],
            hour=row["hour"],
            utilization=round(row["mean"]),
            utilization_max=row["peak"],
            memory_used_mib=row["memory"],
            minutes=row["minutes"],
            gpus=by_gpu.get((row["instance_id"], row["hour"]), []),
        )
        for row in hours
    ]
    with transaction.atomic():
        if rows:
            GpuHourlyReading.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["instance", "hour"],
                update_fields=[
                    "utilization",
                    "utilization_max",
                    "memory_used_mib",
                    "minutes",
                    "gpus",
                ],
            )
        old.delete()
    return len(rows)


def hourly_gpus(minutes) -> dict[tuple, list[list[int]]]:
    """Each GPU's hour from (instance id, minute, gpus) rows, by (instance id, hour): [index,
    mean utilization, peak utilization, most memory used, memory total], as the host's own hour
    is folded. In Python, streamed: the same on SQLite and PostgreSQL, and an hour of 10,000
    hosts is 600,000 small lists, not a query per host."""
    # (instance, hour, index) -> [utilization sum, minutes, peak, most memory, total]
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for instance_id, minute, gpus in minutes.iterator(chunk_size=5000):
        hour = minute.replace(minute=0, second=0, microsecond=0)
        for index, utilization, used, total in gpus:
            acc = sums[(instance_id, hour, index)]
            acc[0] += utilization
            acc[1] += 1
            acc[2] = max(acc[2], utilization)
            acc[3] = max(acc[3], used)
            acc[4] = total
    folded: dict[tuple, list[list[int]]] = defaultdict(list)
    for (instance_id, hour, index), (busy, count, peak, used, total) in sorted(sums.items()):
        folded[(instance_id, hour)].append([index, round(busy / count), peak, used, total])
    return folded


# --- the agent's credential -------------------------------------------------------------------


def agent_secret(instance: Instance) -> str:
    """The host's agent credential. Derived from the server's secret and the host's id and
    launch token, so every retry of a launch hands the cloud the same user data (a changed
    UserData under one ClientToken is an IdempotentParameterMismatch); only its digest is
    stored."""
    message = f"agent|{instance.pk}|{instance.client_token}".encode()
    mac = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()
    return f"{AGENT_PREFIX}{mac}"


def agent_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def agent_credential_issue(*, instance: Instance) -> str:
    """Create the host's agent credential (once: a retried launch finds it) and return the
    secret for its cloud-init."""
    secret = agent_secret(instance)
    HostAgentCredential.objects.get_or_create(
        instance=instance, defaults={"digest": agent_digest(secret)}
    )
    return secret


def agent_authenticate(secret: str, *, now: datetime | None = None) -> HostAgentCredential | None:
    """The credential for a secret while its host lives. instance_transition revokes it when
    the host ends; a host that is no longer live is refused here as well, whatever the row
    says (belt and braces: a credential must never outlive its host)."""
    now = now or timezone.now()
    credential = (
        HostAgentCredential.objects.select_related("instance")
        .filter(digest=agent_digest(secret), revoked_at__isnull=True)
        .first()
    )
    if credential is None:
        return None
    if not credential.instance.is_live:
        HostAgentCredential.objects.filter(pk=credential.pk).update(revoked_at=now)
        return None
    HostAgentCredential.objects.filter(pk=credential.pk).update(last_used_at=now)
    return credential
