"""When a genuine audit row can be sealed, and how the time of a forged one gives it away.

The append-only trigger refuses UPDATE and DELETE but lets INSERT through (the portal writes
rows with it), so anybody who can insert can add a row that claims any time and any sequence
number. The chain cannot stop that; it can notice it, because genuine rows come to be in a
fixed way:

1. A row is stamped with its time when its request (or task step) starts, takes its number
   from the database's sequence when it is inserted, and is seen by the sealer once its
   transaction commits.
2. The sequence issues 1, 2, 3 ...: a number below 1 is never genuine (on PostgreSQL a CHECK
   constraint refuses it too, migration 0003), nor, on PostgreSQL, one above the last number
   the sequence issued. (A row numbered far ahead would otherwise make every genuine row after
   it look slipped in below it. SQLite's AUTOINCREMENT follows any number inserted, so there
   such a row shows only that way.)
3. A row commits within the COMMIT GRACE of its time: two seal periods, far more than any
   request lasts (gunicorn's timeout) or any task holds a transaction. So the seal that first
   sees it began its period at most the grace after the row's time, and no row is dated more
   than the grace before a row with a lower number.
4. A row's number is taken after its time. So a row numbered below one that was already
   sealed cannot be dated after that seal, give or take CLOCK_SKEW between hosts' clocks.
   That is what tells a straggler from a forgery: a straggler's transaction committed after
   rows numbered above it were sealed, and the sealer links it late (within
   ``STRAGGLER_CHECKPOINTS`` periods), but it is dated before that seal; a row slipped into
   a gap of the sealed range afterwards is dated after it, or, if it claims an older time,
   before its own period allows (rule 3).
5. A seal links only rows numbered up to the highest number it saw when it started, so every
   row it links was numbered, hence dated, before its checkpoint's ``period_end``.

A row that breaks one of these was inserted by hand. The sealer still links it (the chain then
keeps its content as evidence), names it in the checkpoint it signs (``flagged_seqs``), and
``audit_verify`` reports it, as do the audit pages and the API (``chain_status``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

# NTP keeps hosts within milliseconds; this leaves room for a host that drifts, without
# giving a forger much cover right after a seal.
CLOCK_SKEW = timedelta(seconds=30)

BAD_SEQ = "bad_seq"
BACKDATED = "backdated"
POSTDATED = "postdated"
LATE_INSERT = "late_insert"
OUT_OF_ORDER = "out_of_order"
UNSEALED = "unsealed"

# What the audit pages and the API say about a row that verify would report.
REASONS = {
    BAD_SEQ: "the database never issued this sequence number",
    BACKDATED: "dated earlier than the period it was sealed into allows",
    POSTDATED: "dated after the seal that sealed it, or in the future",
    LATE_INSERT: "numbered inside the sealed range but dated after that range was sealed",
    OUT_OF_ORDER: "dated long before rows with lower sequence numbers",
    UNSEALED: "not sealed although it is older than two seal periods",
}


def commit_grace(seconds: int | None = None) -> timedelta:
    """The grace a seal applies: two seal periods, or what a checkpoint recorded."""
    if seconds is None:
        seconds = 2 * settings.PORTAL_AUDIT_SEAL_SECONDS
    return timedelta(seconds=seconds)


def sealed_fault(
    seq: int,
    time: datetime,
    *,
    period_start: datetime,
    period_end: datetime,
    grace: timedelta,
    higher_sealed_at: datetime | None,
    issued: int | None = None,
) -> str | None:
    """Why a row sealed into the period ``period_start``..``period_end`` cannot be genuine, or
    None. ``higher_sealed_at``: when a row numbered above it was first sealed, if one was
    sealed before it (the row is a straggler). ``issued``: the last number the database's
    sequence issued, where it can tell (PostgreSQL)."""
    if seq <= 0 or (issued is not None and seq > issued):
        return BAD_SEQ
    if time < period_start - grace:
        return BACKDATED
    if time > period_end + CLOCK_SKEW:
        return POSTDATED
    if higher_sealed_at is not None and time > higher_sealed_at + CLOCK_SKEW:
        return LATE_INSERT
    return None


def unsealed_fault(
    seq: int,
    time: datetime,
    *,
    settled: datetime | None,
    now: datetime,
    higher_sealed_at: datetime | None,
    issued: int | None = None,
) -> str | None:
    """Why a row that is in no sealed period cannot be genuine, or None when it may still be
    waiting for the next seal. ``settled``: rows dated before it should have been sealed by
    now (the newest checkpoint's end less the grace)."""
    if seq <= 0 or (issued is not None and seq > issued):
        return BAD_SEQ
    if higher_sealed_at is not None and time > higher_sealed_at + CLOCK_SKEW:
        return LATE_INSERT
    if settled is not None and time < settled:
        return UNSEALED
    if time > now + CLOCK_SKEW:
        return POSTDATED
    return None


def utc(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
