"""Where each audit row stands against the chain, for the audit pages and the API.

* ``sealed``: linked into the chain under a signed checkpoint, and dated as a genuine row is.
* ``pending``: not sealed yet, and young enough for the next seal to take it.
* ``outside``: a row ``audit_verify`` reports: a number below 1, a row the seals should have
  taken long ago, a row whose time says it was inserted by hand (``audit.lib.timing``), one its seal
  flagged, or a link no checkpoint covers.

A page of rows costs a fixed number of queries, never one per row. The pages judge a row by
its link, its checkpoint and its time; hashes and the order of rows are ``audit_verify``'s work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Max, OuterRef, Subquery
from django.utils import timezone

from audit.lib import timing
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent

SEALED = "sealed"
PENDING = "pending"
OUTSIDE = "outside"
CHOICES = [
    (SEALED, "in the verified chain"),
    (PENDING, "not sealed yet"),
    (OUTSIDE, "outside the sealed chain"),
]

CHECKPOINT_VALUES = (
    "number",
    "first_position",
    "last_position",
    "period_start",
    "period_end",
    "grace_seconds",
    "flagged_seqs",
)


@dataclass(frozen=True)
class Standing:
    status: str
    position: int | None = None
    checkpoint: int | None = None
    note: str = ""


def last_issued_seq() -> int | None:
    """The last number PostgreSQL's sequence issued to an audit row (it only grows, whatever
    the transaction sees); None on SQLite, or before the sequence issued any."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, 'seq')::regclass)",
            [AuditEvent._meta.db_table],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def sealed_where(seqs: Iterable[int]) -> dict[int, tuple[int, dict[str, Any] | None]]:
    """Position and covering checkpoint of each sealed row among ``seqs``, in two queries.

    The covering checkpoint is the first with ``last_position`` at or past the position (an
    index probe per row inside one query); it covers the position only if it also starts at or
    before it, which a deleted checkpoint's successor does not.
    """
    seqs = list(seqs)
    if not seqs:
        return {}
    covering = (
        AuditCheckpoint.objects.filter(last_position__gte=OuterRef("position"))
        .order_by("last_position", "number")
        .values("number")[:1]
    )
    links = list(
        AuditChainLink.objects.filter(event_seq__in=seqs)
        .annotate(checkpoint=Subquery(covering))
        .values_list("event_seq", "position", "checkpoint")
    )
    numbers = {number for _seq, _position, number in links if number is not None}
    checkpoints = {
        row["number"]: row
        for row in AuditCheckpoint.objects.filter(number__in=numbers).values(*CHECKPOINT_VALUES)
    }
    where: dict[int, tuple[int, dict[str, Any] | None]] = {}
    for seq, position, number in links:
        checkpoint = checkpoints.get(number)
        if checkpoint is not None and checkpoint["first_position"] > position:
            checkpoint = None
        where[seq] = (position, checkpoint)
    return where


def annotate_chain(events: Iterable[Any]) -> list[Any]:
    """Set ``event.chain`` (a :class:`Standing`) on each event; at most five queries."""
    events = list(events)
    if not events:
        return events
    where = sealed_where(event.seq for event in events)
    newest = None
    top_sealed = 0
    issued = None
    if any(event.seq not in where for event in events):
        newest = (
            AuditCheckpoint.objects.order_by("-number")
            .values("number", "period_end", "grace_seconds")
            .first()
        )
        top_sealed = AuditChainLink.objects.aggregate(top=Max("event_seq"))["top"] or 0
        # Read after the rows: every genuine row among them is numbered at or below it.
        issued = last_issued_seq()
    now = timezone.now()
    flagged: dict[int, set[int]] = {}
    for event in events:
        if event.seq in where:
            event.chain = _sealed_standing(event, *where[event.seq], flagged)
        else:
            event.chain = _unsealed_standing(event, newest, top_sealed, issued, now)
    return events


def _sealed_standing(event, position: int, checkpoint, flagged: dict[int, set[int]]) -> Standing:
    if checkpoint is None:
        return Standing(
            OUTSIDE, position, None, f"sealed at position {position}, but no checkpoint covers it"
        )
    number = checkpoint["number"]
    fault = timing.sealed_fault(
        event.seq,
        event.time,
        period_start=checkpoint["period_start"],
        period_end=checkpoint["period_end"],
        grace=timing.commit_grace(checkpoint["grace_seconds"]),
        higher_sealed_at=None,
    )
    if fault is not None:
        return Standing(OUTSIDE, position, number, timing.REASONS[fault])
    if number not in flagged:
        flagged[number] = {int(seq) for seq in checkpoint["flagged_seqs"].split()}
    if event.seq in flagged[number]:
        return Standing(
            OUTSIDE,
            position,
            number,
            f"flagged by checkpoint {number} when it sealed it: its time says it was "
            "inserted by hand",
        )
    return Standing(SEALED, position, number)


def _unsealed_standing(event, newest, top_sealed: int, issued: int | None, now) -> Standing:
    settled = higher = None
    if newest is not None:
        settled = newest["period_end"] - timing.commit_grace(newest["grace_seconds"])
        if event.seq < top_sealed:
            # Numbered below a sealed row: it cannot be dated after the newest seal.
            higher = newest["period_end"]
    fault = timing.unsealed_fault(
        event.seq, event.time, settled=settled, now=now, higher_sealed_at=higher, issued=issued
    )
    if fault is None:
        return Standing(PENDING)
    return Standing(OUTSIDE, note=timing.REASONS[fault])


def body_summary(event) -> dict | list | None:
    """The stored body summary as data. The portal only stores canonical JSON, but a row
    inserted by hand may hold anything, and reading it must not break the page."""
    if not event.body_summary:
        return None
    try:
        data = json.loads(event.body_summary)
    except ValueError:
        data = None
    if isinstance(data, dict | list):
        return data
    return {"_not_json": event.body_summary[:2000]}
