"""Walk the hash chain and its checkpoints and say exactly what does not add up.

Read-only. Three passes, each streaming in keyset pages so that memory stays flat however long
the chain is:

1. checkpoints in number order: signatures, numbering, the chain of signatures, coverage;
2. links in position order: no gaps, each link follows the one before, heads match checkpoints;
3. links in sequence order merged with events in sequence order
   (``audit.services.verify_rows``): each row hashes to its link and fits its period, and every
   row outside the chain is accounted for;

and over the whole chain, the checkpoints against the witness (``audit.services.witness``),
which alone can tell that the newest checkpoints were deleted with their links and rows.

Each problem names the sequence numbers concerned and its own kind: an edited row, a deleted
row, two rows swapped, a deleted checkpoint, a truncated tail, a forged checkpoint, a row
inserted by hand (a number below 1, backdated, postdated, slipped into the sealed range, out
of order, never sealed; see ``audit.lib.timing``), and a few rarer ones (a broken link, a sealer
that stopped).

A range (``--from``/``--to``) checks every checkpoint that covers it, all their links and rows,
and then every row the range selects that those checkpoints did not seal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from audit.lib import chain, timing
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent, AuditPrune
from audit.selectors.status import last_issued_seq
from audit.services.verify_rows import PAGE, Higher, Periods, Scope, check_rows, check_window
from audit.services.witness import witness_check

CHECKPOINT_FIELDS = (
    "number",
    "created_at",
    "period_start",
    "period_end",
    "first_position",
    "last_position",
    "event_count",
    "first_seq",
    "last_seq",
    "head_hash",
    "prev_signature",
    "grace_seconds",
    "flagged_seqs",
    "key_id",
    "signature",
)


@dataclass(order=True)
class Problem:
    seq: int
    kind: str = field(compare=False)
    message: str = field(compare=False)

    def __str__(self) -> str:
        return self.message


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    rows: int = 0
    links: int = 0
    checkpoints: int = 0
    pending: int = 0
    first_position: int | None = None
    last_position: int | None = None
    seconds: float = 0.0
    # The witness file compared with (None: none configured) and its newest checkpoint.
    witness_path: str | None = None
    witnessed: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: str, seq: int | None, message: str) -> None:
        self.problems.append(Problem(seq if seq is not None else -1, kind, message))


def _seqs(first: int | None, last: int | None) -> str:
    if first is None:
        return "no rows"
    return f"seq {first}" if first == last else f"seq {first}–{last}"


def _checkpoints(number_from: int | None, number_to: int | None):
    query = AuditCheckpoint.objects.order_by("number")
    if number_from is not None:
        query = query.filter(number__gte=number_from)
    if number_to is not None:
        query = query.filter(number__lte=number_to)
    for row in query.values_list(*CHECKPOINT_FIELDS).iterator(chunk_size=PAGE):
        yield dict(zip(CHECKPOINT_FIELDS, row, strict=True))


def _links_by_position(first: int, last: int):
    cursor = first - 1
    while cursor < last:
        page = list(
            AuditChainLink.objects.filter(position__gt=cursor, position__lte=last)
            .order_by("position")
            .values_list("position", "event_seq", "prev_hash", "hash")[:PAGE]
        )
        if not page:
            return
        yield from page
        cursor = page[-1][0]


def _parse_bound(value: str | int | datetime | None) -> tuple[int | None, datetime | None]:
    if value is None or value == "":
        return None, None
    if isinstance(value, int):
        return value, None
    if isinstance(value, datetime):
        return None, value
    text = str(value).strip()
    if text.isdigit():
        return int(text), None
    from django.utils.dateparse import parse_date, parse_datetime

    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise ValueError(
                f"{text!r} is neither a sequence number nor a date, e.g. 1200 or 2026-11-29."
            )
        moment = datetime(day.year, day.month, day.day)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return None, moment


def _window(start, end) -> Q:
    """The rows a range selects by number or by time."""
    from_seq, from_time = _parse_bound(start)
    to_seq, to_time = _parse_bound(end)
    window = Q()
    if from_seq is not None:
        window &= Q(seq__gte=from_seq)
    if from_time is not None:
        window &= Q(time__gte=from_time)
    if to_seq is not None:
        window &= Q(seq__lte=to_seq)
    if to_time is not None:
        window &= Q(time__lte=to_time)
    return window


def _checkpoint_range(start, end) -> tuple[int | None, int | None]:
    """Checkpoint numbers whose periods could hold the rows of the requested sequence or
    time range: a genuine row is sealed by a period that began at most the commit grace after
    its time and ended at most the grace before it (``audit.lib.timing``)."""
    from_seq, from_time = _parse_bound(start)
    to_seq, to_time = _parse_bound(end)
    grace = timing.commit_grace()
    query = AuditCheckpoint.objects.all()
    if from_seq is not None:
        query = query.filter(last_seq__gte=from_seq)
    if from_time is not None:
        query = query.filter(period_end__gte=from_time - grace)
    low = query.order_by("number").values_list("number", flat=True).first()
    query = AuditCheckpoint.objects.all()
    if to_seq is not None:
        query = query.filter(first_seq__lte=to_seq)
    if to_time is not None:
        query = query.filter(period_start__lte=to_time + grace)
    high = query.order_by("-number").values_list("number", flat=True).first()
    return low, high


def audit_chain_verify(
    *,
    start: str | int | datetime | None = None,
    end: str | int | datetime | None = None,
    now: datetime | None = None,
) -> Report:
    """Verify the whole chain, or the sealed periods overlapping ``start``..``end`` (each a
    sequence number or a date/time)."""
    began = time.perf_counter()
    report = Report()
    now = now or timezone.now()
    ranged = start not in (None, "") or end not in (None, "")
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # One snapshot for every pass, so a seal committing meanwhile cannot look like damage.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            _verify(report, start, end, now, ranged)
    else:
        _verify(report, start, end, now, ranged)
    report.problems.sort()
    report.seconds = time.perf_counter() - began
    return report


def _verify(report: Report, start, end, now: datetime, ranged: bool) -> None:
    key = chain.signing_key()
    our_key = chain.key_id(key)

    # The chain's starting point: the genesis, or the newest signed retention record.
    prune = None
    for record in AuditPrune.objects.order_by("through_checkpoint"):
        payload = chain.prune_payload(record.__dict__)
        if record.key_id != our_key or not chain.signature_valid(payload, record.signature, key):
            report.add(
                "forged_prune",
                None,
                f"retention record through checkpoint {record.through_checkpoint}: forged — "
                "its signature does not verify with PORTAL_AUDIT_SIGNING_KEY",
            )
        prune = record
    anchor = {
        "number": prune.through_checkpoint if prune else 0,
        "last_position": prune.through_position if prune else 0,
        "head_hash": prune.head_hash if prune else chain.GENESIS,
        "signature": prune.last_signature if prune else "",
        "last_seq": None,
    }

    # Read the links' extent before the checkpoints: links committed later are then ignored
    # (their checkpoint may not be in our list), and links that existed before are covered by
    # a checkpoint we do see, since a seal commits both together.
    top_link = AuditChainLink.objects.aggregate(top=Max("position"))["top"] or 0

    number_from = number_to = None
    seed = None
    covered = True
    if ranged:
        number_from, number_to = _checkpoint_range(start, end)
        covered = not (number_from is None or number_to is None or number_from > number_to)
        if covered:
            before = (
                AuditCheckpoint.objects.filter(number__lt=number_from)
                .order_by("-number")
                .values_list(*CHECKPOINT_FIELDS)
                .first()
            )
            if before is not None:
                anchor = dict(zip(CHECKPOINT_FIELDS, before, strict=True))
                sealed_before = AuditCheckpoint.objects.filter(number__lt=number_from).aggregate(
                    top=Max("last_seq")
                )["top"]
                if sealed_before is not None:
                    # Not always the first seal of a higher number, but never earlier: a
                    # later bound, which can only let a forgery through, never accuse a row.
                    seed = Higher(anchor["number"], sealed_before, anchor["period_end"])
    periods = Periods(seed)

    # Pass 1: checkpoints.
    previous = anchor
    newest = None
    # Where each non-empty checkpoint's head should be: (number, last_seq, head_hash).
    boundaries: dict[int, tuple[int, int, str]] = {}
    # Positions a deleted checkpoint took with it: reported once, as the checkpoint.
    explained: list[tuple[int, int]] = []
    first_position = anchor["last_position"] + 1
    low_seq = high_seq = None
    for checkpoint in _checkpoints(number_from, number_to) if covered else ():
        report.checkpoints += 1
        gap = _check_checkpoint(report, checkpoint, previous, key, our_key)
        if gap is not None:
            explained.append(gap)
        if checkpoint["event_count"] > 0:
            boundaries[checkpoint["last_position"]] = (
                checkpoint["number"],
                checkpoint["last_seq"],
                checkpoint["head_hash"],
            )
            periods.add(checkpoint)
            if low_seq is None or checkpoint["first_seq"] < low_seq:
                low_seq = checkpoint["first_seq"]
            if high_seq is None or checkpoint["last_seq"] > high_seq:
                high_seq = checkpoint["last_seq"]
        elif checkpoint["head_hash"] != previous["head_hash"] and (
            checkpoint["number"] == previous["number"] + 1
        ):
            report.add(
                "rewritten",
                checkpoint["first_seq"],
                f"checkpoint {checkpoint['number']}: chain rewritten — an empty period must "
                "keep the previous head hash",
            )
        previous = newest = checkpoint
    last_checkpoint_position = newest["last_position"] if newest else anchor["last_position"]
    last_position = last_checkpoint_position if ranged else max(top_link, last_checkpoint_position)
    report.first_position, report.last_position = first_position, last_position

    # Pass 2: links in position order.
    expected_position = first_position
    expected_prev = anchor["head_hash"]
    previous_seq = anchor.get("last_seq")
    heads: dict[int, str] = {}
    for position, seq, prev_hash, digest in _links_by_position(first_position, last_position):
        report.links += 1
        if position != expected_position:
            missing = (expected_position, position - 1)
            if not any(lo <= missing[0] and missing[1] <= hi for lo, hi in explained):
                where = (
                    f"between seq {previous_seq} and seq {seq}"
                    if previous_seq is not None
                    else f"before seq {seq}"
                )
                report.add(
                    "links_deleted",
                    seq,
                    f"rows {where}: deleted together with their chain links — positions "
                    f"{missing[0]}–{missing[1]} are missing",
                )
            expected_prev = None
        if expected_prev is not None and prev_hash != expected_prev:
            report.add(
                "broken",
                seq,
                f"seq {seq}: chain broken — the link at position {position} does not follow "
                "the one before it",
            )
        if position in boundaries:
            heads[position] = digest
        expected_prev = digest
        expected_position = position + 1
        previous_seq = seq
    chain_end = expected_position - 1

    for position, (number, last_seq, head_hash) in boundaries.items():
        if position in heads and heads[position] != head_hash:
            report.add(
                "rewritten",
                last_seq,
                f"checkpoint {number}: chain rewritten — the hash at position "
                f"{position} (seq {last_seq}) differs from the signed head",
            )
    if newest is not None and last_checkpoint_position > chain_end:
        last_seen = f"seq {previous_seq}" if previous_seq is not None else "the start"
        report.add(
            "truncated",
            newest["last_seq"],
            f"{_seqs((previous_seq or 0) + 1, newest['last_seq'])}: tail truncated — "
            f"checkpoint {newest['number']} sealed the chain up to position "
            f"{last_checkpoint_position} (seq {newest['last_seq']}), but it ends at position "
            f"{chain_end} ({last_seen})",
        )
    if not ranged and chain_end > last_checkpoint_position:
        uncovered = AuditChainLink.objects.filter(
            position__gt=last_checkpoint_position, position__lte=chain_end
        ).order_by("position")
        first = uncovered.values_list("event_seq", flat=True).first()
        last = uncovered.reverse().values_list("event_seq", flat=True).first()
        report.add(
            "checkpoint_deleted",
            first,
            f"{_seqs(first, last)}: checkpoint deleted — positions "
            f"{last_checkpoint_position + 1}–{chain_end} are sealed but no checkpoint covers "
            f"them (the newest checkpoint is {newest['number'] if newest else 'missing'})",
        )

    # Pass 3: rows against their links and their periods, merged in sequence order.
    newest_overall = newest
    if ranged:
        newest_overall = (
            AuditCheckpoint.objects.order_by("-number")
            .values("number", "period_end", "grace_seconds")
            .first()
        )
    scope = Scope(
        periods=periods,
        first_position=first_position,
        last_position=last_position,
        now=now,
        grace=timing.commit_grace(),
        newest=newest_overall,
        top_sealed=AuditChainLink.objects.aggregate(top=Max("event_seq"))["top"] or 0,
        issued=last_issued_seq(),
    )
    if not ranged:
        check_rows(report, scope, None, None)
        witness_check(report, after=anchor["number"])
        _check_freshness(report, newest, now)
        return
    elsewhere = check_rows(report, scope, low_seq, high_seq) if low_seq is not None else []
    check_window(report, scope, _window(start, end), low_seq, high_seq, elsewhere)


def _check_checkpoint(report, checkpoint, previous, key, our_key) -> tuple[int, int] | None:
    """Check one checkpoint against the one before it; return the positions a deleted
    checkpoint before it had sealed, if any."""
    number = checkpoint["number"]
    span = _seqs(checkpoint["first_seq"], checkpoint["last_seq"])
    if checkpoint["key_id"] != our_key:
        report.add(
            "forged",
            checkpoint["first_seq"],
            f"checkpoint {number} ({span}): forged — signed with an unknown key "
            f"{checkpoint['key_id']}, not PORTAL_AUDIT_SIGNING_KEY",
        )
    elif not chain.signature_valid(
        chain.checkpoint_payload(checkpoint), checkpoint["signature"], key
    ):
        report.add(
            "forged",
            checkpoint["first_seq"],
            f"checkpoint {number} ({span}): forged — its signature does not verify with "
            "PORTAL_AUDIT_SIGNING_KEY",
        )
    if number != previous["number"] + 1:
        missing = (
            f"checkpoint {previous['number'] + 1}"
            if number == previous["number"] + 2
            else f"checkpoints {previous['number'] + 1}–{number - 1}"
        )
        first = previous["last_position"] + 1
        last = checkpoint["first_position"] - 1
        low, high = _seq_span(first, last) if last >= first else (None, None)
        if last < first:
            sealed = "no rows"
        elif low is None:
            sealed = f"positions {first}–{last}, whose rows are gone too"
        else:
            sealed = f"positions {first}–{last} ({_seqs(low, high)})"
        report.add(
            "checkpoint_deleted",
            checkpoint["first_seq"],
            f"{missing} deleted — it sealed {sealed}; the next checkpoint is {number}",
        )
        return first, last
    if checkpoint["prev_signature"] != previous["signature"]:
        report.add(
            "forged",
            checkpoint["first_seq"],
            f"checkpoint {number} ({span}): forged or replaced — it does not carry checkpoint "
            f"{previous['number']}'s signature",
        )
    if checkpoint["first_position"] != previous["last_position"] + 1:
        report.add(
            "forged",
            checkpoint["first_seq"],
            f"checkpoint {number} ({span}): starts at position {checkpoint['first_position']}"
            f" but checkpoint {previous['number']} ended at {previous['last_position']}",
        )
    return None


def _seq_span(first: int, last: int) -> tuple[int | None, int | None]:
    seqs = AuditChainLink.objects.filter(position__gte=first, position__lte=last)
    low = seqs.order_by("event_seq").values_list("event_seq", flat=True).first()
    high = seqs.order_by("-event_seq").values_list("event_seq", flat=True).first()
    return low, high


def _check_freshness(report, newest, now) -> None:
    period = timedelta(seconds=settings.PORTAL_AUDIT_SEAL_SECONDS)
    if newest is None:
        oldest = AuditEvent.objects.order_by("seq").values_list("time", flat=True).first()
        if oldest is not None and oldest < now - 3 * period:
            report.add(
                "stale",
                None,
                f"no checkpoint at all, but rows go back to {oldest:%Y-%m-%d %H:%M} UTC: "
                "the sealer is not running",
            )
        return
    if newest["period_end"] < now - 3 * period:
        report.add(
            "stale",
            newest["last_seq"],
            f"no checkpoint since checkpoint {newest['number']} at "
            f"{newest['period_end']:%Y-%m-%d %H:%M} UTC (one is due every {period}): the "
            "sealer stopped, or the newest checkpoints and rows were deleted",
        )
