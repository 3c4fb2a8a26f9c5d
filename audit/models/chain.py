"""audit/models/chain.py: the hash chain that proves nobody edited the log: one link per
event, and the signed checkpoints that seal each period."""

from __future__ import annotations

from django.db import models


class AuditChainLink(models.Model):
    """Where one event sits in the hash chain: ``hash = H(prev_hash, seq, event content)``.

    ``position`` counts links 1, 2, 3 ... without gaps. Each link keeps the previous link's hash
    as well as its own, so a verifier can check a row's content without walking from the start,
    and can tell an edited row (content no longer matches) from a removed link (the next link
    no longer follows). ``event_seq`` is not a foreign key: a deleted event must leave its link
    behind as evidence.
    """

    position = models.BigIntegerField(primary_key=True)
    event_seq = models.BigIntegerField(unique=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        db_table = "audit_chain_link"
        ordering = ["position"]

    def __str__(self) -> str:
        return f"link {self.position} → seq {self.event_seq}"


class AuditCheckpoint(models.Model):
    """A signed statement that the chain had ``head_hash`` after ``last_position``.

    The sealer writes one every period, also for periods without calls, so a missing
    checkpoint or a quiet gap shows. Each signs the previous one's signature (checkpoints form
    a chain of their own) with ``PORTAL_AUDIT_SIGNING_KEY`` (HMAC-SHA256), a key that is not
    ``SECRET_KEY``. ``key_id`` names the key without revealing it. An empty period has
    ``last_position == first_position - 1``.

    ``grace_seconds`` is the commit grace the seal applied and ``flagged_seqs`` the rows it
    linked although their time says they were inserted by hand (``audit.lib.timing``), space
    separated; both are signed. Checkpoints signed before they existed have no grace.
    """

    number = models.BigIntegerField(primary_key=True)
    created_at = models.DateTimeField()
    period_start = models.DateTimeField()
    period_end = models.DateTimeField(db_index=True)
    first_position = models.BigIntegerField()
    last_position = models.BigIntegerField()
    event_count = models.IntegerField()
    first_seq = models.BigIntegerField(null=True, blank=True)
    last_seq = models.BigIntegerField(null=True, blank=True)
    head_hash = models.CharField(max_length=64)
    prev_signature = models.CharField(max_length=64, blank=True)
    grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    flagged_seqs = models.TextField(blank=True, default="")
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=64)

    class Meta:
        verbose_name = "signed checkpoint"
        verbose_name_plural = "signed checkpoints"
        db_table = "audit_checkpoint"
        ordering = ["number"]
        # The audit pages find the checkpoint of a row's position with it.
        indexes = [models.Index(fields=["last_position"], name="audit_checkpoint_last_pos")]

    def __str__(self) -> str:
        return f"checkpoint {self.number}"
