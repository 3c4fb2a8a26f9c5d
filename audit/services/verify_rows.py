"""Pass 3 of ``audit_verify``: every row against its link and against its period.

Links and rows are merged in sequence order, each read in keyset pages, so memory stays flat
however many rows there are (the checkpoints in scope are kept as compact arrays: a year of
five-minute periods is about 105,000 entries). Each row is one of:

* sealed in scope: its content must hash to its link, and its time must fit the period it was
  sealed into (``audit.lib.timing``);
* sealed by a checkpoint outside the range being verified: checked when that range is;
* not sealed: waiting for the next seal while it is young, otherwise reported with the reason.

A row gets at most one problem. A ranged verify then also looks at the rows its window selects
that lie outside the checkpoints covering it (:func:`check_window`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q

from audit.lib import chain, timing
from audit.models import AuditChainLink, AuditEvent
from audit.selectors.status import sealed_where

PAGE = 10_000
MAX_SWAP_CANDIDATES = 400
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICRO = timedelta(microseconds=1)

_ACTOR = chain.CONTENT_FIELDS.index("actor_username")
_METHOD = chain.CONTENT_FIELDS.index("method")
_VIEW = chain.CONTENT_FIELDS.index("view_name")
_PATH = chain.CONTENT_FIELDS.index("path")
_STATUS = chain.CONTENT_FIELDS.index("status")
# claim() takes these in this order, after seq and time.
CLAIM_FIELDS = ("seq", "time", "actor_username", "method", "view_name", "path", "status")


def _micros(moment: datetime) -> int:
    return (moment - EPOCH) // MICRO


def _moment(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def claim(actor: str, method: str, view_name: str, path: str, status: int) -> str:
    """What a row says happened, e.g. ``carol DELETE /api/v1/quotas/1/ 204``."""
    return f"{actor or 'anonymous'} {method} {path or view_name} {status}"


def _claim_of(values) -> str:
    return claim(values[_ACTOR], values[_METHOD], values[_VIEW], values[_PATH], values[_STATUS])


@dataclass(frozen=True)
class Higher:
    """The first checkpoint that sealed a row numbered above some row."""

    number: int
    seq: int
    at: datetime


class Periods:
    """The non-empty checkpoints in scope, in position order, as parallel arrays."""

    def __init__(self, seed: Higher | None = None) -> None:
        self.firsts = array("q")
        self.lasts = array("q")
        self.numbers = array("q")
        # The highest number sealed by this checkpoint or any before it: never decreases.
        self.tops = array("q")
        self.starts = array("q")
        self.ends = array("q")
        self.graces = array("q")
        # What was sealed before the scope (a ranged verify), as one summary.
        self.seed = seed
        self._cached = -1
        self._period: tuple[int, datetime, datetime, timedelta] | None = None

    def add(self, checkpoint: dict[str, Any]) -> None:
        top = checkpoint["last_seq"]
        if self.tops:
            top = max(top, self.tops[-1])
        self.firsts.append(checkpoint["first_position"])
        self.lasts.append(checkpoint["last_position"])
        self.numbers.append(checkpoint["number"])
        self.tops.append(top)
        self.starts.append(_micros(checkpoint["period_start"]))
        self.ends.append(_micros(checkpoint["period_end"]))
        grace = timing.commit_grace(checkpoint["grace_seconds"])
        self.graces.append(grace // MICRO)

    def index_of(self, position: int) -> int | None:
        cached = self._cached
        if cached >= 0 and self.firsts[cached] <= position <= self.lasts[cached]:
            return cached
        index = bisect_left(self.lasts, position)
        if index == len(self.lasts) or self.firsts[index] > position:
            return None
        return index

    def period(self, index: int) -> tuple[int, datetime, datetime, timedelta]:
        """Number, start, end and grace of a checkpoint, kept for the rows that follow."""
        if index != self._cached or self._period is None:
            self._cached = index
            self._period = (
                self.numbers[index],
                _moment(self.starts[index]),
                _moment(self.ends[index]),
                timedelta(microseconds=self.graces[index]),
            )
        return self._period

    def higher(self, seq: int, before: int | None = None) -> Higher | None:
        """The first checkpoint (before index ``before``) that sealed a row numbered above
        ``seq``, if any."""
        if self.seed is not None and self.seed.seq > seq:
            return self.seed
        end = len(self.tops) if before is None else before
        if end == 0 or self.tops[end - 1] <= seq:
            return None
        index = bisect_right(self.tops, seq, 0, end)
        return Higher(self.numbers[index], self.tops[index], _moment(self.ends[index]))


@dataclass
class Scope:
    """What the rows are checked against."""

    periods: Periods
    first_position: int
    last_position: int
    now: datetime
    grace: timedelta
    newest: dict[str, Any] | None
    top_sealed: int
    issued: int | None = None

    @property
    def settled(self) -> datetime | None:
        """Rows dated before this should have been sealed by the newest checkpoint."""
        if self.newest is None:
            return None
        return self.newest["period_end"] - timing.commit_grace(self.newest["grace_seconds"])

    def higher_unsealed(self, seq: int) -> Higher | None:
        found = self.periods.higher(seq)
        if found is None and seq < self.top_sealed and self.newest is not None:
            # Sealed outside the checkpoints in scope; the newest seal is a later bound.
            found = Higher(self.newest["number"], self.top_sealed, self.newest["period_end"])
        return found


def _links_by_seq(low: int | None, high: int | None):
    cursor = None
    while True:
        query = AuditChainLink.objects.all()
        if low is not None:
            query = query.filter(event_seq__gte=low)
        if high is not None:
            query = query.filter(event_seq__lte=high)
        if cursor is not None:
            query = query.filter(event_seq__gt=cursor)
        page = list(
            query.order_by("event_seq").values_list("event_seq", "position", "prev_hash", "hash")[
                :PAGE
            ]
        )
        if not page:
            return
        yield from page
        cursor = page[-1][0]


def _events_by_seq(low: int | None, high: int | None):
    cursor = None
    while True:
        query = AuditEvent.objects.all()
        if low is not None:
            query = query.filter(seq__gte=low)
        if high is not None:
            query = query.filter(seq__lte=high)
        if cursor is not None:
            query = query.filter(seq__gt=cursor)
        page = list(query.order_by("seq").values_list("seq", *chain.CONTENT_FIELDS)[:PAGE])
        if not page:
            return
        yield from page
        cursor = page[-1][0]


class _RowChecker:
    """The time rules over rows in sequence order. ``ordered``: the rows come in sequence
    order with none left out, so each is also held against the latest time before it."""

    def __init__(self, report, scope: Scope, *, ordered: bool = True) -> None:
        self.report = report
        self.scope = scope
        self.ordered = ordered
        self.latest: datetime | None = None
        self.latest_seq = 0

    def sealed(self, seq: int, moment: datetime, position: int, what: Callable[[], str]) -> None:
        periods = self.scope.periods
        index = periods.index_of(position)
        if index is None:
            return  # reported with its checkpoint: deleted, or never written
        number, start, end, grace = periods.period(index)
        higher = periods.higher(seq, before=index)
        fault = timing.sealed_fault(
            seq,
            moment,
            period_start=start,
            period_end=end,
            grace=grace,
            higher_sealed_at=higher.at if higher else None,
            issued=self.scope.issued,
        )
        if fault is None:
            self._in_order(seq, moment, grace, what)
        elif fault == timing.BACKDATED:
            self.report.add(
                fault,
                seq,
                f"seq {seq}: backdated — dated {timing.utc(moment)}, but first sealed by "
                f"checkpoint {number}, whose period began {timing.utc(start)}; a genuine row "
                f"is sealed within {span(grace)} of its time ({what()})",
            )
        elif fault == timing.POSTDATED:
            self.report.add(
                fault,
                seq,
                f"seq {seq}: postdated — dated {timing.utc(moment)}, after checkpoint {number} "
                f"that sealed it was signed at {timing.utc(end)} ({what()})",
            )
        else:
            self.report.add(fault, seq, _message(fault, seq, moment, what(), self.scope, higher))

    def unsealed(self, seq: int, moment: datetime, what: Callable[[], str]) -> None:
        scope = self.scope
        higher = scope.higher_unsealed(seq) if seq > 0 else None
        fault = timing.unsealed_fault(
            seq,
            moment,
            settled=scope.settled,
            now=scope.now,
            higher_sealed_at=higher.at if higher else None,
            issued=scope.issued,
        )
        if fault is None:
            self.report.pending += 1
            self._in_order(seq, moment, scope.grace, what)
            return
        self.report.add(fault, seq, _message(fault, seq, moment, what(), scope, higher))

    def _in_order(self, seq: int, moment: datetime, grace: timedelta, what) -> None:
        if not self.ordered:
            return
        latest = self.latest
        if latest is None or moment > latest:
            self.latest, self.latest_seq = moment, seq
        elif moment < latest - grace:
            self.report.add(
                timing.OUT_OF_ORDER,
                seq,
                f"seq {seq}: out of order — dated {timing.utc(moment)}, more than "
                f"{span(grace)} before seq {self.latest_seq} ({timing.utc(latest)}), which has "
                f"a lower number ({what()})",
            )


def _message(
    fault: str,
    seq: int,
    moment: datetime,
    what: str,
    scope: Scope | None = None,
    higher: Higher | None = None,
) -> str:
    if fault == timing.BAD_SEQ and seq <= 0:
        return (
            f"seq {seq}: not a sequence number the database issues (they start at 1), so the "
            f"row was inserted by hand — dated {timing.utc(moment)} ({what})"
        )
    if fault == timing.BAD_SEQ and scope is not None:
        return (
            f"seq {seq}: not a sequence number the database issued (its sequence has issued "
            f"up to {scope.issued}), so the row was inserted by hand — dated "
            f"{timing.utc(moment)} ({what})"
        )
    if fault == timing.LATE_INSERT and higher is not None:
        return (
            f"seq {seq}: inserted into the sealed range — dated {timing.utc(moment)}, after "
            f"checkpoint {higher.number} had sealed seq {higher.seq} at "
            f"{timing.utc(higher.at)}, yet numbered below it ({what})"
        )
    if fault == timing.UNSEALED and scope is not None and scope.newest is not None:
        newest = scope.newest
        return (
            f"seq {seq}: row not in the chain — inserted after its period was sealed (dated "
            f"{timing.utc(moment)}, more than "
            f"{span(timing.commit_grace(newest['grace_seconds']))} before checkpoint "
            f"{newest['number']} at {timing.utc(newest['period_end'])}, sealed rows run past "
            f"seq {scope.top_sealed}) ({what})"
        )
    return f"seq {seq}: postdated — dated {timing.utc(moment)}, in the future ({what})"


def check_rows(report, scope: Scope, low: int | None, high: int | None) -> list[int]:
    """Merge the links numbered ``low``..``high`` (None: unbounded) with the rows numbered
    the same, checking each row in scope. Returns the rows sealed outside the scope (a
    straggler sealed by a later checkpoint, or a row slipped into a gap and sealed later),
    for :func:`check_window`."""
    rows = _RowChecker(report, scope)
    first, last = scope.first_position, scope.last_position
    mismatches: list[tuple[int, int, str, str, bytes]] = []
    elsewhere: list[int] = []
    events = _events_by_seq(low, high)
    event = next(events, None)
    for seq, position, prev_hash, digest in _links_by_seq(low, high):
        while event is not None and event[0] < seq:
            rows.unsealed(event[0], event[1], _describe(event))
            event = next(events, None)
        in_scope = first <= position <= last
        if event is not None and event[0] == seq:
            if in_scope:
                report.rows += 1
                content = chain.content_bytes(event[1:])
                if chain.link_hash(prev_hash, seq, content) != digest:
                    # Its time is not to be trusted; the edit is what gets reported.
                    mismatches.append((seq, position, prev_hash, digest, content))
                else:
                    rows.sealed(seq, event[1], position, _describe(event))
            else:
                elsewhere.append(seq)
            event = next(events, None)
        elif in_scope:
            report.add(
                "deleted",
                seq,
                f"seq {seq}: row deleted — it was sealed at position {position} and is gone",
            )
    while event is not None:
        rows.unsealed(event[0], event[1], _describe(event))
        event = next(events, None)
    _classify_mismatches(report, mismatches)
    return elsewhere


def _describe(event) -> Callable[[], str]:
    return lambda: _claim_of(event[1:])


def check_window(
    report, scope: Scope, window: Q, low: int | None, high: int | None, elsewhere: list[int]
) -> None:
    """The rows the window selects that the checkpoints covering it did not seal: those
    numbered outside ``low``..``high`` (the numbers those checkpoints sealed), and those among
    ``elsewhere``. A genuine row never is one, except while it waits for its seal."""
    selected = AuditEvent.objects.filter(window)
    outside = selected if low is None else selected.exclude(seq__gte=low, seq__lte=high)
    cursor = None
    while True:
        query = outside if cursor is None else outside.filter(seq__gt=cursor)
        page = list(query.order_by("seq").values_list(*CLAIM_FIELDS)[:PAGE])
        if not page:
            break
        _check_window_rows(report, scope, page)
        cursor = page[-1][0]
    for start in range(0, len(elsewhere), 500):
        chunk = elsewhere[start : start + 500]
        page = list(selected.filter(seq__in=chunk).order_by("seq").values_list(*CLAIM_FIELDS))
        _check_window_rows(report, scope, page)


def _check_window_rows(report, scope: Scope, page) -> None:
    rows = _RowChecker(report, scope, ordered=False)
    where = sealed_where(row[0] for row in page)
    for seq, moment, *fields in page:
        what = claim(*fields)
        if seq not in where:
            rows.unsealed(seq, moment, lambda what=what: what)
            continue
        position, checkpoint = where[seq]
        if checkpoint is None:
            report.add(
                "uncovered",
                seq,
                f"seq {seq}: dated {timing.utc(moment)}, inside the window, and sealed at "
                f"position {position}, which no checkpoint covers ({what})",
            )
            continue
        fault = timing.sealed_fault(
            seq,
            moment,
            period_start=checkpoint["period_start"],
            period_end=checkpoint["period_end"],
            grace=timing.commit_grace(checkpoint["grace_seconds"]),
            higher_sealed_at=None,
            issued=scope.issued,
        )
        if fault is not None:
            report.add(
                fault,
                seq,
                f"seq {seq}: {fault} — dated {timing.utc(moment)}, inside the window, but "
                f"sealed by checkpoint {checkpoint['number']} "
                f"({timing.utc(checkpoint['period_start'])} to "
                f"{timing.utc(checkpoint['period_end'])}), outside the checkpoints that "
                f"cover it ({what})",
            )


def _classify_mismatches(report, mismatches) -> None:
    swapped: set[int] = set()
    if 1 < len(mismatches) <= MAX_SWAP_CANDIDATES:
        for i, (seq_a, _pos_a, prev_a, hash_a, content_a) in enumerate(mismatches):
            if seq_a in swapped:
                continue
            for seq_b, _pos_b, prev_b, hash_b, content_b in mismatches[i + 1 :]:
                if seq_b in swapped:
                    continue
                # Contents exchanged between two rows that kept their numbers ...
                exchanged = (
                    chain.link_hash(prev_a, seq_a, content_b) == hash_a
                    and chain.link_hash(prev_b, seq_b, content_a) == hash_b
                )
                # ... or two rows exchanged whole, numbers and all.
                renumbered = (
                    chain.link_hash(prev_a, seq_b, content_b) == hash_a
                    and chain.link_hash(prev_b, seq_a, content_a) == hash_b
                )
                if exchanged or renumbered:
                    swapped.update((seq_a, seq_b))
                    report.add(
                        "swapped",
                        seq_a,
                        f"seq {seq_a} and seq {seq_b}: rows swapped — each holds what was "
                        "sealed for the other",
                    )
                    break
    for seq, position, _prev, _digest, _content in mismatches:
        if seq not in swapped:
            report.add(
                "edited",
                seq,
                f"seq {seq}: row edited — its content no longer matches the hash sealed at "
                f"position {position}",
            )
