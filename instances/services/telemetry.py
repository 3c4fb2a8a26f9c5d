"""GPU telemetry: readings in (from the simulated cloud, or posted by each host's agent), kept
per minute for a retention period and then per hour, and the agents' credentials.

Ingest is one pass with a fixed number of queries however many hosts report: one read of the
hosts that may report, one upsert of the readings (tests/bench/bench_telemetry.py measures it).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max
from django.db.models.functions import TruncHour
from django.utils import timezone

from instances.models import GpuHourlyReading, GpuReading, HostAgentCredential, Instance
from instances.providers import get_provider

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
# Hosts whose readings count: a host reports while it runs, and its last minutes may arrive
# just after it began stopping.
REPORTING = frozenset({Instance.Status.RUNNING, Instance.Status.STOPPING})
AGENT_PREFIX = "gpa_"


@dataclass(frozen=True)
class Reading:
    """One minute of one host, as it arrives (the minute is floored when stored)."""

    instance_id: str
    at: datetime
    utilization: int
    memory_used_mib: int


@dataclass
class IngestReport:
    """What a pass stored and what it refused, each refusal with its reason: nothing is
    dropped without a word."""

    stored: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def reading_problem(reading: Reading, *, now: datetime) -> str:
    """Why a reading cannot be stored (empty when it can)."""
    if not 0 <= reading.utilization <= 100:
        return "utilization must be a percentage, 0 to 100"
    if reading.memory_used_mib < 0:
        return "memory_used_mib must not be negative"
    if reading.at > now + timedelta(seconds=settings.PORTAL_TELEMETRY_MAX_SKEW_SECONDS):
        return (
            f"the timestamp is more than {settings.PORTAL_TELEMETRY_MAX_SKEW_SECONDS} s ahead "
            "of the portal's clock; fix the host's clock (NTP)"
        )
    oldest = now - timedelta(hours=settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS)
    if reading.at < oldest:
        return (
            f"the timestamp is older than {settings.PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS} h, "
            "past the minute readings the portal keeps"
        )
    return ""


def readings_ingest(readings: list[Reading], *, now: datetime | None = None) -> IngestReport:
    """Store a minute (or a batch) of readings: a reading slightly ahead of the clock is clamped
    to now, one too far ahead or too old is refused, a host that is not running is refused; a
    repeated minute replaces the earlier reading. Two queries, however many readings."""
    now = now or timezone.now()
    report = IngestReport()
    ids = {reading.instance_id for reading in readings}
    reporting = set(
        str(pk)
        for pk in Instance.objects.filter(pk__in=ids, status__in=REPORTING).values_list(
            "pk", flat=True
        )
    )
    rows: dict[tuple[str, datetime], GpuReading] = {}
    for index, reading in enumerate(readings):
        problem = reading_problem(reading, now=now)
        if not problem and str(reading.instance_id) not in reporting:
            problem = "the host is not running"
        if problem:
            report.refused.append((index, problem))
            continue
        minute = _minute(min(reading.at, now))
        # The last of two readings of one minute wins, as a repeated post does.
        rows[(str(reading.instance_id), minute)] = GpuReading(
            instance_id=reading.instance_id,
            minute=minute,
            utilization=reading.utilization,
            memory_used_mib=reading.memory_used_mib,
        )
    if rows:
        GpuReading.objects.bulk_create(
            rows.values(),
            update_conflicts=True,
            unique_fields=["instance", "minute"],
            update_fields=["utilization", "memory_used_mib"],
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
            utilization=samples[cloud_id][0],
            memory_used_mib=samples[cloud_id][1],
        )
        for pk, cloud_id in hosts
    ]
    return readings_ingest(readings, now=now)


def telemetry_compact(*, now: datetime | None = None) -> int:
    """Fold minute readings past the retention period into hourly ones and delete them. Whole
    hours only, so a pass never splits one;
    safe to run twice (the hourly rows are upserted from every minute still there)."""
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
    rows = [
        GpuHourlyReading(
            instance_id=row["instance_id"],
            hour=row["hour"],
            utilization=round(row["mean"]),
            utilization_max=row["peak"],
            memory_used_mib=row["memory"],
            minutes=row["minutes"],
        )
        for row in hours
    ]
    with transaction.atomic():
        if rows:
            GpuHourlyReading.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["instance", "hour"],
                update_fields=["utilization", "utilization_max", "memory_used_mib", "minutes"],
            )
        old.delete()
    return len(rows)


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
