"""Writers of the audit log (docs/design.md rule 1): events, the hash chain, retention, export.

Other apps record what their tasks and commands change with :func:`audit_record_system`, and
name the object a view acted on with :func:`audit_set_object`; the middleware records every
web request by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from datetime import datetime, timedelta
from functools import cache
from importlib import metadata
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from audit.lib import chain, timing
from audit.lib.context import current_request_id, current_task_started, new_request_id
from audit.lib.redaction import canonical_json, clean_identifier, clean_text, redact_data
from audit.models import (
    SYSTEM_ACTOR_PREFIX,
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
    AuditExport,
    AuditPrune,
    Outcome,
)
from audit.selectors.status import last_issued_seq
from audit.witness import witness_publish_on_commit

log = logging.getLogger(__name__)

SEAL_BATCH = 5000
# A row whose transaction commits after a later row was sealed is picked up by the next seals,
# as long as it turns up within this many periods (an hour at the default period).
STRAGGLER_CHECKPOINTS = 12


@cache
def app_version() -> str:
    try:
        return metadata.version("gpu-portal")
    except metadata.PackageNotFoundError:
        return "unknown"


_INSERT_SQL: dict[tuple[str, bool], str] = {}


def _insert_sql(relaxed: bool) -> str:
    key = (connection.vendor, relaxed)
    if key not in _INSERT_SQL:
        quote = connection.ops.quote_name
        table = quote(AuditEvent._meta.db_table)
        columns = ", ".join(quote(name) for name in chain.CONTENT_FIELDS)
        marks = ", ".join(["%s"] * len(chain.CONTENT_FIELDS))
        if relaxed:
            # Still one statement: the setting is made while it runs and read at its commit.
            _INSERT_SQL[key] = (
                f"INSERT INTO {table} ({columns}) SELECT {marks} "  # noqa: S608 - model names
                "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed"
            )
        else:
            _INSERT_SQL[key] = f"INSERT INTO {table} ({columns}) VALUES ({marks})"  # noqa: S608
    return _INSERT_SQL[key]


def audit_event_insert(*, fields: dict[str, Any], durable: bool = True) -> None:
    """Insert one event row: exactly one SQL statement, in the caller's transaction.

    The middleware's path, run on every request: a prepared INSERT without the ORM's save
    machinery or a RETURNING clause. ``fields`` holds every column in ``CONTENT_FIELDS``;
    values are adapted the way the ORM adapts them, so both paths store the same text.

    ``durable=False`` is for the rows of safe requests, committed on their own: on PostgreSQL
    their commit does not wait for the WAL to reach the disk (``synchronous_commit=off`` for
    that one transaction), which saves the flush on every read. A PostgreSQL crash can then
    lose the read rows of the last few hundred milliseconds (3 x wal_writer_delay); it cannot
    reorder or corrupt them. Rows of changes always commit durably, with the change.
    """
    relaxed = not durable and connection.vendor == "postgresql" and not connection.in_atomic_block
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        adapt(fields[name]) if name == "time" else fields[name] for name in chain.CONTENT_FIELDS
    ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(relaxed), params)


def audit_set_actor(request, user, *, auth_method: str = "password") -> None:
    """Name who acted when the request itself is not signed in, e.g. an endpoint that takes a
    username and password in its body and issues a token: the row then shows that person."""
    target = getattr(request, "_request", request)
    target.audit_actor = user
    target.audit_auth = auth_method


def audit_set_object(request, object_ref: str) -> None:
    """Name the object a view acted on (``order:<uuid>``) when the URL does not say it, e.g.
    after a create. Works with Django and DRF requests alike."""
    target = getattr(request, "_request", request)
    target.audit_object = object_ref


def body_digest(body: bytes, *, keyed: bool) -> str:
    """SHA-256 of the request body; keyed (HMAC) when the body held a secret, so that the
    stored digest cannot be used to guess the secret offline."""
    if keyed:
        return "hmac-sha256:" + hmac.new(chain.signing_key(), body, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def audit_record_system(
    *,
    name: str,
    action: str = "",
    object_ref: str = "",
    outcome: str = Outcome.SUCCESS,
    summary: dict[str, Any] | None = None,
    error: str = "",
    kind: str = "task",
    duration_us: int | None = None,
    request_id: str | None = None,
) -> AuditEvent:
    """Record a state change made by a Celery task or a management command.

    The actor is ``system:<name>``; the request id is the one that caused the work (carried
    into Celery tasks by their headers) or a new one. Call it inside the service's transaction
    so that the row exists exactly when the change does; after a rollback, call it again with
    ``outcome="error"``. Cheap: one INSERT. Not for beat ticks that change nothing.

    ``duration_us``, unless the caller measured it: inside a Celery task, how long the task had
    run when it recorded the change (at least 1 µs, so "measured" shows); elsewhere 0, unknown.
    """
    if duration_us is None:
        started = current_task_started.get()
        duration_us = 0 if started is None else max(1, (time.perf_counter() - started) * 1e6)
    fields = {
        "time": timezone.now(),
        "request_id": request_id or current_request_id.get() or new_request_id(),
        "actor_id": None,
        "actor_username": clean_text(f"{SYSTEM_ACTOR_PREFIX}{name}", 150),
        "actor_role": "system",
        "auth_method": "system",
        "source_ip": "",
        "user_agent": "",
        "method": "COMMAND" if kind == "command" else "TASK",
        "route": "",
        "view_name": clean_text(name, 200),
        "path": "",
        "query": "",
        "status": 0,
        "outcome": Outcome(outcome).value,
        "duration_us": max(0, int(duration_us)),
        "object_ref": clean_identifier(object_ref),
        "action": clean_text(action, 64),
        "error": clean_text(error, 200),
        "body_bytes": None,
        "body_digest": "",
        "body_summary": canonical_json(redact_data(summary)) if summary else "",
        "app_version": app_version(),
    }
    return AuditEvent.objects.create(**fields)


# --- the chain ---------------------------------------------------------------------------


def _straggler_floor(last: AuditCheckpoint | None) -> int:
    if last is None:
        return 0
    back = (
        AuditCheckpoint.objects.filter(number__lte=last.number - STRAGGLER_CHECKPOINTS)
        .order_by("-number")
        .values_list("last_position", flat=True)
        .first()
    )
    recent = AuditChainLink.objects.filter(position__gt=back or 0)
    return recent.aggregate(low=Min("event_seq"))["low"] or 0


def audit_chain_seal(*, now: datetime | None = None) -> AuditCheckpoint:
    """Seal every new row into the hash chain, in sequence order, and sign a checkpoint.

    Writes a checkpoint even when nothing happened, so that a quiet period and a deleted
    checkpoint look different. Two sealers running at once cannot both win: positions and
    checkpoint numbers are primary keys, so the second one's transaction fails and changes
    nothing.

    A row whose time says it was inserted by hand (``audit.lib.timing``: dated before its period
    allows, after this seal, after a higher number was sealed, or long before a lower number)
    is linked all the same, so that the chain keeps it as evidence, and named in the
    checkpoint's ``flagged_seqs``. Rows numbered below 1 are never linked.
    """
    now = now or timezone.now()
    grace = timing.commit_grace()
    with transaction.atomic():
        # Only rows numbered up to here: a row numbered later may be dated after ``now``
        # (rule 5 of audit.lib.timing); the next seal takes it. Never a number the sequence has
        # not issued yet (rule 2): that row was inserted by hand and stays out of the chain.
        top = AuditEvent.objects.aggregate(top=Max("seq"))["top"] or 0
        issued = last_issued_seq()
        if issued is not None:
            top = min(top, issued)
        last = AuditCheckpoint.objects.order_by("-number").first()
        if last is None:
            prune = AuditPrune.objects.order_by("-through_checkpoint").first()
            number = (prune.through_checkpoint if prune else 0) + 1
            head = prune.head_hash if prune else chain.GENESIS
            prev_signature = prune.last_signature if prune else ""
            position = (prune.through_position if prune else 0) + 1
            first_time = AuditEvent.objects.filter(seq__gt=0).aggregate(t=Min("time"))["t"]
            period_start = min(first_time, now) if first_time else now
        else:
            number = last.number + 1
            head = last.head_hash
            prev_signature = last.signature
            position = last.last_position + 1
            period_start = last.period_end
        first_position = position

        sealed_up_to = AuditChainLink.objects.aggregate(top=Max("event_seq"))["top"] or 0
        floor = _straggler_floor(last)
        linked = AuditChainLink.objects.filter(event_seq__gt=floor).values("event_seq")
        stragglers = list(
            AuditEvent.objects.filter(seq__gt=floor, seq__lt=sealed_up_to)
            .exclude(seq__in=linked)
            .values_list("seq", flat=True)
        )
        wanted = Q(seq__gt=sealed_up_to, seq__lte=top)
        if stragglers:
            wanted |= Q(seq__in=stragglers)
        # A straggler is numbered below a row sealed by the last checkpoint at the latest, so
        # it cannot be dated after that seal.
        higher_sealed_at = last.period_end if last is not None else None
        seqs: list[int] = []
        flagged: list[int] = []
        latest = None
        cursor = 0
        while True:
            # Keyset pages rather than one open cursor: the links are written as we go.
            page = list(
                AuditEvent.objects.filter(wanted, seq__gt=cursor)
                .order_by("seq")
                .values_list("seq", *chain.CONTENT_FIELDS)[:SEAL_BATCH]
            )
            if not page:
                break
            links = []
            for seq, *values in page:
                moment = values[chain.TIME_INDEX]
                fault = timing.sealed_fault(
                    seq,
                    moment,
                    period_start=period_start,
                    period_end=now,
                    grace=grace,
                    higher_sealed_at=higher_sealed_at if seq < sealed_up_to else None,
                )
                if fault is None and latest is not None and moment < latest - grace:
                    fault = timing.OUT_OF_ORDER
                if fault is None:
                    latest = moment if latest is None else max(latest, moment)
                else:
                    flagged.append(seq)
                digest = chain.link_hash(head, seq, chain.content_bytes(tuple(values)))
                links.append(
                    AuditChainLink(position=position, event_seq=seq, prev_hash=head, hash=digest)
                )
                head = digest
                position += 1
                seqs.append(seq)
            AuditChainLink.objects.bulk_create(links)
            cursor = page[-1][0]

        checkpoint = {
            "number": number,
            "created_at": now,
            "period_start": period_start,
            "period_end": now,
            "first_position": first_position,
            "last_position": position - 1,
            "event_count": len(seqs),
            "first_seq": min(seqs) if seqs else None,
            "last_seq": max(seqs) if seqs else None,
            "head_hash": head,
            "prev_signature": prev_signature,
            "grace_seconds": int(grace.total_seconds()),
            "flagged_seqs": " ".join(str(seq) for seq in flagged),
            "key_id": chain.key_id(),
        }
        signature = chain.sign(chain.checkpoint_payload(checkpoint))
        if flagged:
            log.warning(
                "audit: checkpoint %d sealed %d row(s) whose time says they were inserted by "
                "hand: seq %s; run manage.py audit_verify",
                number,
                len(flagged),
                " ".join(str(seq) for seq in flagged[:20]),
            )
        created = AuditCheckpoint.objects.create(**checkpoint, signature=signature)
        # Published outside the database once committed: the chain cannot witness its tail.
        witness_publish_on_commit(created)
        return created


# --- retention ---------------------------------------------------------------------------


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
