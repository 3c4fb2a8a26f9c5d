"""instances/models/telemetry.py: GPU telemetry's tables: a reading per host per minute, hourly
summaries after the retention period, and the credential a host's agent posts readings with."""

from __future__ import annotations

from django.db import models


class GpuReading(models.Model):
    """A host's GPU utilization and memory in use during one minute (the minute it began).

    One row per host and minute: a repeated post of the same minute replaces it, so an agent
    that retries never counts twice. Rows older than PORTAL_TELEMETRY_MINUTE_RETENTION_HOURS are
    folded into GpuHourlyReading and deleted."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="gpu_readings"
    )
    minute = models.DateTimeField()
    # The help text is spelt as migration 0004 records it (respelling it needs a migration).
    utilization = models.PositiveSmallIntegerField(help_text="Mean GPU utilization, percent")
    memory_used_mib = models.PositiveIntegerField(help_text="GPU memory in use, all GPUs, MiB")
    # Each GPU's own reading, by index: [index, utilization %, memory used MiB, memory total
    # MiB], a compact list on the row rather than a row per GPU (eight times the rows, and
    # every reader joins them back). Empty from an agent that sends only the totals; when
    # present, the totals above agree with it (services.telemetry.reading_problem).
    gpus = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["instance", "minute"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "minute"], name="gpureading_unique_minute")
        ]
        indexes = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.minute:%Y-%m-%d %H:%M} {self.utilization}%"


class GpuHourlyReading(models.Model):
    """One hour of a host's minute readings, kept after the minutes are deleted."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="gpu_hours"
    )
    hour = models.DateTimeField()
    utilization = models.PositiveSmallIntegerField(help_text="Mean of the minutes, percent")
    utilization_max = models.PositiveSmallIntegerField()
    memory_used_mib = models.PositiveIntegerField(help_text="Most memory in use in the hour")
    minutes = models.PositiveSmallIntegerField(help_text="How many minutes reported")
    # Each GPU's hour, from the minutes that carried it: [index, mean utilization %, peak
    # utilization %, most memory used MiB, memory total MiB]; empty when none did.
    gpus = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["instance", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["instance", "hour"], name="gpuhour_unique_hour")
        ]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.hour:%Y-%m-%d %H}h {self.utilization}%"


class HostAgentCredential(models.Model):
    """What a host's telemetry agent signs its posts with: valid for that host only, only its
    SHA-256 stored, revoked when the host ends."""

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.CASCADE, related_name="agent_credential"
    )
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"agent credential of {self.instance_id}"

    # How the audit log names a call made with it (audit.middleware reads these from
    # ``request.auth``): the host is the actor, not a person, and the credential has an id
    # sequence of its own, so it is never written ``token:<id>`` like a personal API token.
    audit_role = "agent"

    @property
    def audit_actor(self) -> str:
        return f"agent:{self.instance_id}"

    @property
    def audit_auth_method(self) -> str:
        return f"agent-credential:{self.pk}"
