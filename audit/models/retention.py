"""audit/models/retention.py: the signed record of each deletion of old sealed periods."""

from __future__ import annotations

from django.db import models


class AuditPrune(models.Model):
    """What the retention command removed: every period up to ``through_checkpoint``.

    Signed like a checkpoint, it becomes the chain's new starting point, so that a verifier can
    tell retention (signed, whole periods) from somebody deleting the oldest rows.
    """

    pruned_at = models.DateTimeField()
    through_checkpoint = models.BigIntegerField()
    through_position = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    last_signature = models.CharField(max_length=64)
    events_deleted = models.BigIntegerField()
    retention_days = models.IntegerField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=64)

    class Meta:
        verbose_name = "deleted period"
        verbose_name_plural = "deleted periods"
        db_table = "audit_prune"
        ordering = ["through_checkpoint"]

    def __str__(self) -> str:
        return f"pruned through checkpoint {self.through_checkpoint}"
