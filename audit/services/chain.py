"""audit/services/chain.py: the sealer, which links every new row into the hash chain and signs
a checkpoint per period (the arithmetic is audit/lib/chain.py, shared with the verifier)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from audit.lib import chain, timing
from audit.models import (
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
    AuditPrune,
)
from audit.selectors.status import last_issued_seq
from audit.services.witness import witness_publish_on_commit

log = logging.getLogger(__name__)

SEAL_BATCH = 5000
# A row whose transaction commits after a later row was sealed is picked up by the next seals,
# as long as it turns up within this many periods (an hour at the default period).
STRAGGLER_CHECKPOINTS = 12


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
