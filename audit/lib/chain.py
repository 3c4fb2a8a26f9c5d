"""The hash chain's arithmetic: canonical row content, link hashes, checkpoint signatures.

Pure functions, shared by the sealer and the verifier so that both hash exactly the same bytes.
Rows are hashed from what the database gives back (``values_list`` in ``CONTENT_FIELDS``
order), never from the objects that were written, so a value the database rounds or reformats
is hashed the way it is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

GENESIS = "0" * 64

# Every column of AuditEvent but the sequence number, which the link hash binds separately.
CONTENT_FIELDS = (
    "time",
    "request_id",
    "actor_id",
    "actor_username",
    "actor_role",
    "auth_method",
    "source_ip",
    "user_agent",
    "method",
    "route",
    "view_name",
    "path",
    "query",
    "status",
    "outcome",
    "duration_us",
    "object_ref",
    "action",
    "error",
    "body_bytes",
    "body_digest",
    "body_summary",
    "app_version",
)
TIME_INDEX = CONTENT_FIELDS.index("time")


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def content_bytes(values: tuple[Any, ...]) -> bytes:
    """Canonical bytes of one row, given its values in ``CONTENT_FIELDS`` order."""
    row = list(values)
    row[TIME_INDEX] = _utc(row[TIME_INDEX])
    return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()


def link_hash(prev_hash: str, seq: int, content: bytes) -> str:
    digest = hashlib.sha256(b"portal-audit-link-v1\n")
    digest.update(prev_hash.encode())
    digest.update(b"\n%d\n" % seq)
    digest.update(content)
    return digest.hexdigest()


def signing_key() -> bytes:
    return settings.PORTAL_AUDIT_SIGNING_KEY.encode()


def key_id(key: bytes | None = None) -> str:
    """A short name for the signing key that reveals nothing about it."""
    return hmac.new(key or signing_key(), b"portal-audit-key-id", hashlib.sha256).hexdigest()[:16]


def checkpoint_payload(checkpoint: dict[str, Any]) -> bytes:
    """What a checkpoint's signature covers. Version 2 adds the commit grace and the flagged
    rows; a checkpoint without a grace was signed as version 1 and is checked as one, so that
    stripping a version 2 checkpoint's flags breaks its signature."""
    grace = checkpoint.get("grace_seconds")
    fields = [
        "checkpoint-v1" if grace is None else "checkpoint-v2",
        checkpoint["number"],
        _utc(checkpoint["period_start"]),
        _utc(checkpoint["period_end"]),
        _utc(checkpoint["created_at"]),
        checkpoint["first_position"],
        checkpoint["last_position"],
        checkpoint["event_count"],
        checkpoint["first_seq"],
        checkpoint["last_seq"],
        checkpoint["head_hash"],
        checkpoint["prev_signature"],
        checkpoint["key_id"],
    ]
    if grace is not None:
        fields += [grace, checkpoint["flagged_seqs"]]
    return json.dumps(fields, separators=(",", ":")).encode()


CHECKPOINT_DOCUMENT_TIMES = ("created_at", "period_start", "period_end")


def checkpoint_document(checkpoint: Any) -> dict[str, Any]:
    """A checkpoint as a self-contained JSON document (what the S3 export and the witness
    publish): every signed field, times in canonical form, and the signature."""
    return {
        "number": checkpoint.number,
        "created_at": _utc(checkpoint.created_at),
        "period_start": _utc(checkpoint.period_start),
        "period_end": _utc(checkpoint.period_end),
        "first_position": checkpoint.first_position,
        "last_position": checkpoint.last_position,
        "event_count": checkpoint.event_count,
        "first_seq": checkpoint.first_seq,
        "last_seq": checkpoint.last_seq,
        "head_hash": checkpoint.head_hash,
        "prev_signature": checkpoint.prev_signature,
        "grace_seconds": checkpoint.grace_seconds,
        "flagged_seqs": checkpoint.flagged_seqs,
        "key_id": checkpoint.key_id,
        "signature": checkpoint.signature,
    }


def document_signature_valid(document: dict[str, Any], key: bytes | None = None) -> bool:
    """Whether a published checkpoint document still carries the signature of its fields."""
    fields = dict(document)
    for name in CHECKPOINT_DOCUMENT_TIMES:
        fields[name] = datetime.fromisoformat(fields[name])
    return signature_valid(checkpoint_payload(fields), document["signature"], key)


def prune_payload(prune: dict[str, Any]) -> bytes:
    fields = [
        "prune-v1",
        _utc(prune["pruned_at"]),
        prune["through_checkpoint"],
        prune["through_position"],
        prune["head_hash"],
        prune["last_signature"],
        prune["events_deleted"],
        prune["retention_days"],
        prune["key_id"],
    ]
    return json.dumps(fields, separators=(",", ":")).encode()


def sign(payload: bytes, key: bytes | None = None) -> str:
    return hmac.new(key or signing_key(), payload, hashlib.sha256).hexdigest()


def signature_valid(payload: bytes, signature: str, key: bytes | None = None) -> bool:
    return hmac.compare_digest(sign(payload, key), signature)
