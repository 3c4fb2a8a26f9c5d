"""Export of sealed periods to S3: each checkpoint's rows as JSON lines beside its signed
document."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit.lib import chain
from audit.models import (
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
    AuditExport,
)
from audit.services.chain import SEAL_BATCH
from audit.services.events import audit_record_system

# The signed document of one checkpoint, as the S3 export and the witness publish it.
checkpoint_document = chain.checkpoint_document

# --- export to S3 ------------------------------------------------------------------------


def _s3_client():
    import boto3

    kwargs: dict[str, Any] = {"region_name": settings.PORTAL_REGION}
    if settings.PORTAL_AUDIT_S3_ENDPOINT_URL:
        kwargs["endpoint_url"] = settings.PORTAL_AUDIT_S3_ENDPOINT_URL
    return boto3.client("s3", **kwargs)


def export_keys(checkpoint: AuditCheckpoint) -> tuple[str, str]:
    """Object keys of one period: the same period always gets the same keys."""
    base = (
        f"{settings.PORTAL_AUDIT_S3_PREFIX}{checkpoint.period_end:%Y/%m/%d}/"
        f"checkpoint-{checkpoint.number:012d}"
    )
    return f"{base}.events.jsonl", f"{base}.checkpoint.json"


def period_lines(checkpoint: AuditCheckpoint):
    """The period's rows in chain order, one JSON document each, with their link hashes.

    Each line carries the row exactly as hashed (``event`` in ``CONTENT_FIELDS`` order with
    the time in canonical form), so the export can be verified without the database.
    """
    start = checkpoint.first_position
    while start <= checkpoint.last_position:
        end = min(start + SEAL_BATCH - 1, checkpoint.last_position)
        links = list(
            AuditChainLink.objects.filter(position__range=(start, end))
            .order_by("position")
            .values_list("position", "event_seq", "prev_hash", "hash")
        )
        rows = {
            row[0]: row[1:]
            for row in AuditEvent.objects.filter(seq__in=[link[1] for link in links]).values_list(
                "seq", *chain.CONTENT_FIELDS
            )
        }
        for position, seq, prev_hash, digest in links:
            values = rows.get(seq)
            event = None
            if values is not None:
                event = dict(zip(chain.CONTENT_FIELDS, values, strict=True))
                event["time"] = chain._utc(event["time"])
            document = {
                "seq": seq,
                "position": position,
                "prev_hash": prev_hash,
                "hash": digest,
                "event": event,
            }
            yield json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
        start = end + 1


def audit_export_period(*, checkpoint: AuditCheckpoint, client=None) -> AuditExport:
    """Write one period to S3 (JSON Lines plus the signed checkpoint); safe to repeat."""
    bucket = settings.PORTAL_AUDIT_S3_BUCKET
    client = client or _s3_client()
    events_key, checkpoint_key = export_keys(checkpoint)
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as buffer:
        for line in period_lines(checkpoint):
            buffer.write(line.encode())
        buffer.seek(0)
        client.upload_fileobj(
            buffer,
            bucket,
            events_key,
            ExtraArgs={"ContentType": "application/x-ndjson"},
        )
    client.put_object(
        Bucket=bucket,
        Key=checkpoint_key,
        Body=json.dumps(checkpoint_document(checkpoint), indent=2).encode(),
        ContentType="application/json",
    )
    record = AuditExport(
        checkpoint_number=checkpoint.number,
        bucket=bucket,
        events_key=events_key,
        checkpoint_key=checkpoint_key,
        event_count=checkpoint.event_count,
        exported_at=timezone.now(),
    )
    AuditExport.objects.bulk_create([record], ignore_conflicts=True)
    return record


def audit_export_pending(*, client=None, limit: int | None = None) -> int:
    """Export every sealed period not yet in S3, oldest first; 0 when export is off."""
    if not settings.PORTAL_AUDIT_S3_BUCKET:
        return 0
    done = AuditExport.objects.values("checkpoint_number")
    pending = AuditCheckpoint.objects.exclude(number__in=done).order_by("number")
    if limit:
        pending = pending[:limit]
    client = client or _s3_client()
    count = 0
    for checkpoint in pending:
        audit_export_period(checkpoint=checkpoint, client=client)
        count += 1
    if count:
        audit_record_system(
            name="audit.export",
            action="audit.export",
            summary={"periods": count, "bucket": settings.PORTAL_AUDIT_S3_BUCKET},
        )
    return count
