"""The audit log: one row per audited call, and the hash chain that proves nobody edited it.

Every table here is append-only. On PostgreSQL a trigger (migration 0002) refuses UPDATE,
DELETE and TRUNCATE; only the retention service may delete, and only whole sealed periods.
That is why the chain's hashes live in their own table (``AuditChainLink``) instead of a column
on the event: sealing an event must not update it.

The audit app imports no other app of the portal (docs/design.md rule 9: imports run one way),
so the actor is kept as a plain id with a snapshot of the username and role, never as a foreign
key: the row must outlive the user and must never be rewritten by ``on_delete``.
"""

from __future__ import annotations

from django.db import models

from audit.lib.access import reads_whole_log


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    ERROR = "error", "Error"


class AuditEventQuerySet(models.QuerySet):
    def for_user(self, user) -> AuditEventQuerySet:
        """Admins read the whole log; everybody else only their own activity."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if reads_whole_log(user):
            return self.all()
        return self.filter(actor_id=user.pk)


# The actor of a task's or a command's row: system:<name> (audit_record_system).
SYSTEM_ACTOR_PREFIX = "system:"


class AuditEvent(models.Model):
    """One audited call: an API call, an unsafe page request, a sign-in, an admin action, or
    a state change made by a Celery task or a management command (actor ``system:<name>``).

    ``seq`` is the sequence number; the chain seals rows in ``seq`` order. Text fields hold
    redacted, escaped text only (``audit.lib.redaction``); ``body_summary`` is canonical JSON text
    so that its hash never depends on how a database stores JSON.
    """

    seq = models.BigAutoField(primary_key=True)
    time = models.DateTimeField(db_index=True)
    request_id = models.CharField(max_length=64, db_index=True)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_username = models.CharField(max_length=150, blank=True)
    actor_role = models.CharField(max_length=32, blank=True)
    auth_method = models.CharField(max_length=64, blank=True)
    source_ip = models.CharField(max_length=45, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)
    method = models.CharField(max_length=10)
    route = models.CharField(max_length=512, blank=True)
    view_name = models.CharField(max_length=200, blank=True)
    path = models.CharField(max_length=2048, blank=True)
    query = models.TextField(blank=True)
    status = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    duration_us = models.BigIntegerField(default=0)
    object_ref = models.CharField(max_length=255, blank=True)
    action = models.CharField(max_length=64, blank=True)
    error = models.CharField(max_length=200, blank=True)
    body_bytes = models.PositiveIntegerField(null=True, blank=True)
    body_digest = models.CharField(max_length=80, blank=True)
    body_summary = models.TextField(blank=True)
    app_version = models.CharField(max_length=64, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        verbose_name = "recorded call"
        verbose_name_plural = "recorded calls"
        db_table = "audit_event"
        ordering = ["-seq"]
        indexes = [
            models.Index(fields=["actor_id", "seq"], name="audit_event_actor_seq"),
            models.Index(fields=["object_ref"], name="audit_event_object"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.method} {self.path} {self.status}"

    @property
    def actor(self) -> str:
        return self.actor_username or "anonymous"

    @property
    def duration_ms(self) -> float:
        return self.duration_us / 1000

    @property
    def duration_known(self) -> bool:
        """A task or command records its row inside the work it records, before that work has
        finished: a task's row holds how long the task had run by then; a command's (or any
        other system row's) is known only when its caller measured it and passed it."""
        return not (self.is_system and self.duration_us == 0)

    @property
    def is_system(self) -> bool:
        return self.actor_role == "system"


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
