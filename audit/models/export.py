"""audit/models/export.py: which sealed periods were written to S3."""

from __future__ import annotations

from django.db import models


class AuditExport(models.Model):
    """A period written to S3 (events as JSON Lines plus its checkpoint). Re-exporting a period
    overwrites the same keys; this row only remembers that it was done."""

    checkpoint_number = models.BigIntegerField(unique=True)
    bucket = models.CharField(max_length=255)
    events_key = models.CharField(max_length=1024)
    checkpoint_key = models.CharField(max_length=1024)
    event_count = models.IntegerField()
    exported_at = models.DateTimeField()

    class Meta:
        verbose_name = "export to S3"
        verbose_name_plural = "exports to S3"
        db_table = "audit_export"
        ordering = ["checkpoint_number"]

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_number} → s3://{self.bucket}/{self.events_key}"
