"""audit/services/retention.py: deleting whole sealed periods past their retention, with a
signed prune record the verifier starts from."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.lib import chain
from audit.models import (
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
    AuditExport,
    AuditPrune,
)
from audit.services.events import audit_record_system


def _retention_door(state: str) -> None:
    """Open or close the PostgreSQL trigger's door for retention deletes.

    ``SET LOCAL`` lasts until the outermost transaction ends, which may be later than this
    service's own block; so the door is closed again as soon as the deletes are done.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL portal.audit_retention = '{state}'")


def audit_retention_apply(
    *, now: datetime | None = None, days: int | None = None
) -> AuditPrune | None:
    """Delete whole sealed periods older than ``PORTAL_AUDIT_RETENTION_DAYS``, oldest first.

    Never the newest checkpoint (the chain must keep a head), never a period that is not yet
    in S3 when export is on, never a row outside a sealed period. Leaves a signed prune record
    that becomes the chain's new starting point, and an audit row saying what it removed.
    """
    now = now or timezone.now()
    days = settings.PORTAL_AUDIT_RETENTION_DAYS if days is None else days
    if days <= 0:
        return None
    cutoff = now - timedelta(days=days)
    with transaction.atomic():
        newest = AuditCheckpoint.objects.order_by("-number").values_list("number", flat=True)
        newest_number = newest.first()
        if newest_number is None:
            return None
        candidates = AuditCheckpoint.objects.filter(
            period_end__lt=cutoff, number__lt=newest_number
        ).order_by("number")
        exported = None
        if settings.PORTAL_AUDIT_S3_BUCKET:
            exported = set(AuditExport.objects.values_list("checkpoint_number", flat=True))
        through = None
        for checkpoint in candidates.iterator():
            if exported is not None and checkpoint.number not in exported:
                break
            through = checkpoint
        if through is None:
            return None
        _retention_door("on")
        sealed = AuditChainLink.objects.filter(position__lte=through.last_position)
        events_deleted, _ = AuditEvent.objects.filter(seq__in=sealed.values("event_seq")).delete()
        sealed.delete()
        AuditCheckpoint.objects.filter(number__lte=through.number).delete()
        _retention_door("off")
        prune = {
            "pruned_at": now,
            "through_checkpoint": through.number,
            "through_position": through.last_position,
            "head_hash": through.head_hash,
            "last_signature": through.signature,
            "events_deleted": events_deleted,
            "retention_days": days,
            "key_id": chain.key_id(),
        }
        record = AuditPrune.objects.create(
            **prune, signature=chain.sign(chain.prune_payload(prune))
        )
        audit_record_system(
            name="audit_retention",
            kind="command",
            action="audit.prune",
            object_ref=f"audit-checkpoint:{through.number}",
            summary={
                "through_checkpoint": through.number,
                "events_deleted": events_deleted,
                "retention_days": days,
            },
        )
        return record
