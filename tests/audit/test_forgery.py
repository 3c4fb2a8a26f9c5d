"""Rows inserted by hand: the append-only trigger lets INSERT through, so a forger can add a row
with any number and any time. Each forgery the outside probe tried (and a few more) is reported
by ``audit_verify`` by its sequence number, before and after the next seal, over the whole
chain and over the window of time the row claims; the seal names it in its checkpoint; and a
genuine late row is not mistaken for one.

The log is an hour at the end of a month, 23:00 to 00:00 UTC, sealed every five minutes, with
the clock frozen (``hour`` in conftest).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError

from audit.lib import chain
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent
from audit.services import audit_chain_seal
from audit.services.verify import audit_chain_verify
from tests.audit.conftest import MIDNIGHT, PERIOD, T0, forge, make_events, tampering

pytestmark = pytest.mark.django_db

CLAIM = "carol DELETE /api/v1/quotas/1/ 204"


def lines(report) -> list[str]:
    return [f"{problem.kind}: {problem}" for problem in report.problems]


def seal_at(clock, moment: datetime) -> AuditCheckpoint:
    clock.move_to(moment)
    return audit_chain_seal()


def time_of(seq: int) -> datetime:
    return AuditEvent.objects.get(seq=seq).time


def test_an_hour_of_genuine_log_verifies_whole_and_window_by_window(hour):
    assert audit_chain_verify().ok
    for index in range(12):
        begins = T0 + index * PERIOD
        report = audit_chain_verify(start=begins, end=begins + PERIOD)
        assert report.ok, (index, lines(report))
        assert report.rows > 0
    checkpoints = AuditCheckpoint.objects.order_by("number")
    assert [(c.grace_seconds, c.flagged_seqs) for c in checkpoints] == [(600, "")] * 12


# --- (a) a number below 1 ------------------------------------------------------------------


@pytest.mark.parametrize("window", [False, True], ids=["whole", "window"])
def test_a_row_numbered_below_one_is_reported_by_its_number(hour, clock, window):
    forge(seq=-7, time=T0 + timedelta(minutes=31))
    expected = [
        "bad_seq: seq -7: not a sequence number the database issues (they start at 1), so the "
        f"row was inserted by hand — dated 2026-11-30 23:31:00 UTC ({CLAIM})"
    ]
    around = {"start": T0 + timedelta(minutes=30), "end": T0 + timedelta(minutes=32)}
    assert lines(audit_chain_verify(**(around if window else {}))) == expected
    # The seal leaves it out of the chain, and it stays reported.
    seal_at(clock, MIDNIGHT + PERIOD)
    assert not AuditChainLink.objects.filter(event_seq=-7).exists()
    assert lines(audit_chain_verify(**(around if window else {}))) == expected


def test_the_verify_command_names_the_row_below_one_whole_and_over_its_time(hour):
    forge(seq=-7, time=T0 + timedelta(minutes=31))
    expected = (
        "PROBLEM bad_seq: seq -7: not a sequence number the database issues (they start at "
        f"1), so the row was inserted by hand — dated 2026-11-30 23:31:00 UTC ({CLAIM})"
    )
    for args in ([], ["--from", "2026-11-30T23:30", "--to", "2026-11-30T23:32"]):
        err = StringIO()
        with pytest.raises(CommandError, match="1 problem"):
            call_command("audit_verify", *args, stdout=StringIO(), stderr=err)
        assert err.getvalue().splitlines() == [expected]


@pytest.mark.postgres
def test_postgresql_refuses_a_plain_insert_numbered_below_one(hour):
    with pytest.raises(DatabaseError, match="audit_event_seq_positive"):
        forge(seq=-7, time=T0 + timedelta(minutes=31), as_owner=False)
    assert not AuditEvent.objects.filter(seq__lte=0).exists()


@pytest.mark.postgres
def test_a_row_numbered_ahead_of_the_sequence_stays_out_and_accuses_no_row_after_it(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forge(seq=10**12, time=MIDNIGHT + timedelta(minutes=1))
    made = make_events(3, start=MIDNIGHT + timedelta(minutes=1, seconds=10))
    assert seal_at(clock, MIDNIGHT + PERIOD).flagged_seqs == ""
    made += make_events(2, start=MIDNIGHT + PERIOD + timedelta(seconds=10))
    seal_at(clock, MIDNIGHT + 2 * PERIOD)
    assert AuditChainLink.objects.filter(event_seq__in=[row.seq for row in made]).count() == 5
    assert not AuditChainLink.objects.filter(event_seq=10**12).exists()
    assert lines(audit_chain_verify()) == [
        "bad_seq: seq 1000000000000: not a sequence number the database issued (its sequence "
        f"has issued up to {made[-1].seq}), so the row was inserted by hand — dated 2026-12-01 "
        f"00:01:00 UTC ({CLAIM})"
    ]


# --- (b) a backdated row given the next number ---------------------------------------------


def test_a_backdated_row_with_the_next_number_is_reported_before_and_after_its_seal(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forged = forge(time=T0 + timedelta(minutes=7))
    assert lines(audit_chain_verify()) == [
        f"unsealed: seq {forged}: row not in the chain — inserted after its period was "
        "sealed (dated 2026-11-30 23:07:00 UTC, more than 10 min before checkpoint 12 at "
        f"2026-12-01 00:00:00 UTC, sealed rows run past seq {hour.periods[-1][-1]}) ({CLAIM})"
    ]

    checkpoint = seal_at(clock, MIDNIGHT + PERIOD)
    assert (checkpoint.event_count, checkpoint.flagged_seqs) == (1, str(forged))
    assert lines(audit_chain_verify()) == [
        f"backdated: seq {forged}: backdated — dated 2026-11-30 23:07:00 UTC, but first "
        "sealed by checkpoint 13, whose period began 2026-12-01 00:00:00 UTC; a genuine row "
        f"is sealed within 10 min of its time ({CLAIM})"
    ]


def test_the_window_a_backdated_row_claims_checks_its_checkpoints_and_reports_it(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forged = forge(time=T0 + timedelta(minutes=7))
    seal_at(clock, MIDNIGHT + PERIOD)
    report = audit_chain_verify(start=T0 + timedelta(minutes=6), end=T0 + timedelta(minutes=8))
    # Every checkpoint whose period could hold a row of 23:06-23:08 (the grace either side):
    # 1, 2, 3 (quiet) and 4, with all their rows, not "0 rows".
    assert (report.checkpoints, report.rows) == (4, 15)
    assert lines(report) == [
        f"backdated: seq {forged}: backdated — dated 2026-11-30 23:07:00 UTC, inside the "
        "window, but sealed by checkpoint 13 (2026-12-01 00:00:00 UTC to 2026-12-01 00:05:00 "
        f"UTC), outside the checkpoints that cover it ({CLAIM})"
    ]


# --- (c) a row with a duplicate time and the next number -----------------------------------


def test_a_copy_of_an_older_row_with_the_next_number_is_reported_by_its_number(hour, clock):
    original = hour.periods[5][2]
    copied = AuditEvent.objects.filter(seq=original).values(*chain.CONTENT_FIELDS).get()
    clock.move_to(MIDNIGHT + timedelta(minutes=2))
    forged = forge(**copied)
    when = "2026-11-30 23:27:10 UTC"
    assert time_of(forged) == time_of(original)
    what = "alice GET /api/v1/instance-types/?page=2 200"
    assert [p.seq for p in audit_chain_verify().problems] == [forged]

    seal_at(clock, MIDNIGHT + PERIOD)
    assert lines(audit_chain_verify()) == [
        f"backdated: seq {forged}: backdated — dated {when}, but first sealed by checkpoint "
        "13, whose period began 2026-12-01 00:00:00 UTC; a genuine row is sealed within 10 min "
        f"of its time ({what})"
    ]
    window = audit_chain_verify(start=time_of(original), end=time_of(original))
    assert [(p.kind, p.seq) for p in window.problems] == [("backdated", forged)]


# --- (d) a row slipped between two seals into the sealed range -----------------------------


def test_a_row_inserted_into_a_gap_of_the_sealed_range_is_reported_before_and_after_its_seal(
    hour, clock
):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forge(seq=hour.old_gap, time=MIDNIGHT + timedelta(minutes=1))
    expected = [
        f"late_insert: seq {hour.old_gap}: inserted into the sealed range — dated 2026-12-01 "
        f"00:01:00 UTC, after checkpoint 5 had sealed seq {hour.periods[4][-1]} at 2026-11-30 "
        f"23:25:00 UTC, yet numbered below it ({CLAIM})"
    ]
    assert lines(audit_chain_verify()) == expected

    # The next seal links it as a straggler would be, and flags it.
    checkpoint = seal_at(clock, MIDNIGHT + PERIOD)
    assert (checkpoint.first_seq, checkpoint.flagged_seqs) == (hour.old_gap, str(hour.old_gap))
    assert lines(audit_chain_verify()) == expected


def test_a_row_slipped_into_a_gap_with_a_time_from_its_old_period_is_reported(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forge(seq=hour.old_gap, time=T0 + timedelta(minutes=22))
    assert [(p.kind, p.seq) for p in audit_chain_verify().problems] == [("unsealed", hour.old_gap)]
    checkpoint = seal_at(clock, MIDNIGHT + PERIOD)
    assert checkpoint.flagged_seqs == str(hour.old_gap)
    assert [(p.kind, p.seq) for p in audit_chain_verify().problems] == [("backdated", hour.old_gap)]
    window = audit_chain_verify(start=T0 + timedelta(minutes=21), end=T0 + timedelta(minutes=23))
    assert [(p.kind, p.seq) for p in window.problems] == [("backdated", hour.old_gap)]


# --- more ways to lie with the time ---------------------------------------------------------


def test_a_row_dated_long_before_the_rows_numbered_below_it_is_out_of_order(hour, clock):
    """The sealer stops for forty minutes, so one period is long: a forged row dated inside it
    still fits the period, but not the rows numbered before it."""
    make_events(5, start=MIDNIGHT + timedelta(minutes=35), step_ms=60_000, seqs=range(1100, 1105))
    clock.move_to(MIDNIGHT + timedelta(minutes=40))
    forged = forge(time=MIDNIGHT + timedelta(minutes=10))
    expected = (
        f"out_of_order: seq {forged}: out of order — dated 2026-12-01 00:10:00 UTC, more than "
        f"10 min before seq 1104 (2026-12-01 00:39:00 UTC), which has a lower number ({CLAIM})"
    )
    assert expected in lines(audit_chain_verify())  # beside "stale": the sealer stopped
    checkpoint = audit_chain_seal()
    assert checkpoint.flagged_seqs == str(forged)
    assert lines(audit_chain_verify()) == [expected]


def test_a_row_dated_in_the_future_is_reported_before_and_after_its_seal(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forged = forge(time=MIDNIGHT + timedelta(days=1))
    assert lines(audit_chain_verify()) == [
        f"postdated: seq {forged}: postdated — dated 2026-12-02 00:00:00 UTC, in the future "
        f"({CLAIM})"
    ]
    checkpoint = seal_at(clock, MIDNIGHT + PERIOD)
    assert checkpoint.flagged_seqs == str(forged)
    assert lines(audit_chain_verify()) == [
        f"postdated: seq {forged}: postdated — dated 2026-12-02 00:00:00 UTC, after "
        f"checkpoint 13 that sealed it was signed at 2026-12-01 00:05:00 UTC ({CLAIM})"
    ]


def test_a_window_checks_every_row_of_the_checkpoints_that_cover_it(hour):
    """A window of one minute still checks the whole periods around it."""
    victim = hour.periods[7][0]  # 23:35:30, in checkpoint 8
    with tampering():
        AuditEvent.objects.filter(seq=victim).update(path="/api/v1/nothing/")
    report = audit_chain_verify(start=T0 + timedelta(minutes=44), end=T0 + timedelta(minutes=45))
    assert [(p.kind, p.seq) for p in report.problems] == [("edited", victim)]


def test_the_flags_a_seal_wrote_are_signed(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    forge(time=T0 + timedelta(minutes=7))
    seal_at(clock, MIDNIGHT + PERIOD)
    with tampering():
        AuditCheckpoint.objects.filter(number=13).update(flagged_seqs="")
    assert "checkpoint 13 (seq" in str(
        next(p for p in audit_chain_verify().problems if p.kind == "forged")
    )


def test_checkpoints_signed_before_the_flags_existed_still_verify(hour):
    """A checkpoint without a grace is checked as version 1 was signed, with today's grace."""
    with tampering():
        previous = ""
        for checkpoint in AuditCheckpoint.objects.order_by("number"):
            checkpoint.grace_seconds = None
            checkpoint.prev_signature = previous
            checkpoint.signature = chain.sign(chain.checkpoint_payload(checkpoint.__dict__))
            checkpoint.save()
            previous = checkpoint.signature
    # Signed before the witness existed too: the witness saw today's signatures, not these.
    Path(settings.PORTAL_AUDIT_WITNESS_PATH).unlink()
    assert (
        "checkpoint-v1"
        in chain.checkpoint_payload(AuditCheckpoint.objects.values().get(number=1)).decode()
    )
    assert audit_chain_verify().ok


# --- genuine late rows are not forgeries ----------------------------------------------------


def test_a_straggler_dated_before_the_seal_of_the_rows_above_it_is_not_flagged(hour, clock):
    """Its request took a number at 23:56:40, before the rows above it, and committed after the
    midnight seal sealed them."""
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    make_events(1, start=T0 + timedelta(minutes=56, seconds=40), seqs=[hour.fresh_gap])
    report = audit_chain_verify()
    assert report.ok and report.pending == 1
    checkpoint = seal_at(clock, MIDNIGHT + PERIOD)
    assert (checkpoint.first_seq, checkpoint.flagged_seqs) == (hour.fresh_gap, "")
    assert audit_chain_verify().ok


def test_a_slow_request_committing_minutes_after_its_time_is_not_flagged(hour, clock):
    clock.move_to(MIDNIGHT + timedelta(minutes=1))
    make_events(1, start=T0 + timedelta(minutes=53))
    assert audit_chain_verify().ok
    assert seal_at(clock, MIDNIGHT + PERIOD).flagged_seqs == ""
    assert audit_chain_verify().ok
    window = audit_chain_verify(start=T0 + timedelta(minutes=52), end=T0 + timedelta(minutes=54))
    assert window.ok and window.rows == 21
