"""audit/models/events.py: the audit log's rows, one per audited call (``AuditEvent``), their
outcomes, and who may read which (``for_user``). The actor is a plain id with a snapshot of the
username and role, never a foreign key (see audit/models/__init__.py)."""

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
