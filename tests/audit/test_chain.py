"""The hash chain and its signed checkpoints: sealing, verifying, and catching tampering.

Each of the six ways to tamper with the log named in the issue is caught with its own kind of
message that names the sequence numbers concerned, and an untouched chain never raises an
alarm.
"""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connections
from django.utils import timezone

from audit.lib import chain
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent
from audit.services import audit_chain_seal, audit_record_system
from audit.services.verify import audit_chain_verify
from audit.tasks import seal_audit_chain
from tests.audit.conftest import make_events, tampering

pytestmark = pytest.mark.django_db


@pytest.fixture
def sealed_log():
    """90 rows in four periods (one of them quiet), all sealed: seq 1-30, 31-60, -, 61-90."""
    made = make_events(30)
    audit_chain_seal()
    made += make_events(30, path="/api/v1/images/")
    audit_chain_seal()
    audit_chain_seal()
    made += make_events(30, method="POST", status=201, path="/api/v1/orders/")
    audit_chain_seal()
    return [row.seq for row in made]


def kinds(report) -> list[str]:
    return [problem.kind for problem in report.problems]


def test_sealing_links_every_row_in_sequence_order_and_signs_a_checkpoint(sealed_log):
    links = list(AuditChainLink.objects.order_by("position"))
    assert [link.event_seq for link in links] == sealed_log
    assert [link.position for link in links] == list(range(1, 91))
    assert links[0].prev_hash == chain.GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(links))
    checkpoints = list(AuditCheckpoint.objects.order_by("number"))
    assert [(c.number, c.event_count) for c in checkpoints] == [(1, 30), (2, 30), (3, 0), (4, 30)]
    assert checkpoints[1].prev_signature == checkpoints[0].signature
    assert checkpoints[2].head_hash == checkpoints[1].head_hash == links[59].hash
    assert checkpoints[3].head_hash == links[-1].hash
    assert checkpoints[3].key_id == chain.key_id()


def test_a_quiet_period_still_gets_a_checkpoint(db):
    checkpoint = audit_chain_seal()
    assert (checkpoint.number, checkpoint.event_count, checkpoint.head_hash) == (
        1,
        0,
        chain.GENESIS,
    )
    assert audit_chain_verify().ok


def test_an_untouched_chain_verifies(sealed_log):
    report = audit_chain_verify()
    assert report.ok, report.problems
    assert (report.rows, report.links, report.checkpoints) == (90, 90, 4)


def test_rows_recorded_after_the_last_seal_are_waiting_not_wrong(sealed_log):
    make_events(5)
    report = audit_chain_verify()
    assert report.ok
    assert report.pending == 5


def test_an_edited_row_is_found_by_its_sequence_number(sealed_log):
    victim = sealed_log[41]
    with tampering():
        AuditEvent.objects.filter(seq=victim).update(actor_username="mallory")
    report = audit_chain_verify()
    assert kinds(report) == ["edited"]
    assert str(report.problems[0]) == (
        f"seq {victim}: row edited — its content no longer matches the hash sealed at position 42"
    )


def test_a_deleted_row_is_found_by_its_sequence_number(sealed_log):
    victim = sealed_log[10]
    with tampering():
        AuditEvent.objects.filter(seq=victim).delete()
    report = audit_chain_verify()
    assert kinds(report) == ["deleted"]
    assert str(report.problems[0]) == (
        f"seq {victim}: row deleted — it was sealed at position 11 and is gone"
    )


def test_two_swapped_rows_are_found_as_a_swap(sealed_log):
    first, second = (
        AuditEvent.objects.get(seq=sealed_log[20]),
        AuditEvent.objects.get(seq=sealed_log[65]),
    )
    fields = chain.CONTENT_FIELDS
    with tampering():
        AuditEvent.objects.filter(seq=first.seq).update(
            **{name: getattr(second, name) for name in fields}
        )
        AuditEvent.objects.filter(seq=second.seq).update(
            **{name: getattr(first, name) for name in fields}
        )
    report = audit_chain_verify()
    assert kinds(report) == ["swapped"]
    assert str(report.problems[0]) == (
        f"seq {first.seq} and seq {second.seq}: rows swapped — each holds what was sealed for "
        "the other"
    )


def test_two_rows_swapped_in_the_chain_itself_are_found_as_a_swap(sealed_log):
    a, b = sealed_log[3], sealed_log[4]
    with tampering():
        AuditChainLink.objects.filter(event_seq=a).update(event_seq=-1)
        AuditChainLink.objects.filter(event_seq=b).update(event_seq=a)
        AuditChainLink.objects.filter(event_seq=-1).update(event_seq=b)
    assert kinds(audit_chain_verify()) == ["swapped"]


def test_a_deleted_checkpoint_is_found_with_the_rows_it_sealed(sealed_log):
    with tampering():
        AuditCheckpoint.objects.filter(number=2).delete()
    report = audit_chain_verify()
    assert kinds(report) == ["checkpoint_deleted"]
    assert str(report.problems[0]) == (
        f"checkpoint 2 deleted — it sealed positions 31–60 (seq {sealed_log[30]}–"
        f"{sealed_log[59]}); the next checkpoint is 3"
    )


def test_deleting_the_newest_checkpoint_leaves_sealed_rows_uncovered(sealed_log):
    with tampering():
        AuditCheckpoint.objects.filter(number=4).delete()
    report = audit_chain_verify()
    assert kinds(report) == ["checkpoint_deleted"]
    assert "positions 61–90 are sealed but no checkpoint covers them" in str(report.problems[0])


def test_a_truncated_tail_is_found_with_the_rows_that_are_gone(sealed_log):
    gone = sealed_log[-5:]
    with tampering():
        AuditChainLink.objects.filter(event_seq__in=gone).delete()
        AuditEvent.objects.filter(seq__in=gone).delete()
    report = audit_chain_verify()
    assert kinds(report) == ["truncated"]
    assert str(report.problems[0]).startswith(
        f"seq {gone[0]}–{gone[-1]}: tail truncated — checkpoint 4 sealed the chain up to "
        "position 90"
    )


def test_a_forged_checkpoint_is_found(sealed_log):
    with tampering():
        AuditCheckpoint.objects.filter(number=4).update(head_hash="f" * 64)
    report = audit_chain_verify()
    assert "forged" in kinds(report)
    forged = next(p for p in report.problems if p.kind == "forged")
    assert str(forged) == (
        f"checkpoint 4 (seq {sealed_log[60]}–{sealed_log[89]}): forged — its signature does "
        "not verify with PORTAL_AUDIT_SIGNING_KEY"
    )


def test_a_checkpoint_signed_with_another_key_is_forged_too(sealed_log, settings):
    settings.PORTAL_AUDIT_SIGNING_KEY = "somebody-elses-key"
    report = audit_chain_verify()
    assert set(kinds(report)) == {"forged"}
    assert "signed with an unknown key" in str(report.problems[0])


def test_a_chain_rewritten_without_the_key_does_not_match_its_checkpoint(sealed_log):
    """Edit a row and recompute every hash after it: the rows agree with their links again,
    but the signed checkpoint still holds the old head."""
    victim = sealed_log[70]
    with tampering():
        AuditEvent.objects.filter(seq=victim).update(path="/api/v1/nothing-to-see/")
        rows = AuditEvent.objects.filter(seq__gte=victim).order_by("seq")
        previous = AuditChainLink.objects.get(event_seq=victim).prev_hash
        for seq, *values in rows.values_list("seq", *chain.CONTENT_FIELDS):
            digest = chain.link_hash(previous, seq, chain.content_bytes(tuple(values)))
            AuditChainLink.objects.filter(event_seq=seq).update(prev_hash=previous, hash=digest)
            previous = digest
    report = audit_chain_verify()
    assert kinds(report) == ["rewritten"]
    assert "checkpoint 4: chain rewritten" in str(report.problems[0])


@pytest.fixture
def log_with_a_gap():
    """Rows 1000-1009 and 1020-1029 sealed; 1010-1019 never used (rolled-back inserts)."""
    make_events(10, seqs=range(1000, 1010))
    make_events(10, seqs=range(1020, 1030))
    audit_chain_seal()


def test_a_row_slipped_into_the_sealed_past_is_reported(log_with_a_gap):
    make_events(1, seqs=[1015], start=timezone.now() - timedelta(hours=3), path="/api/alibi/")
    report = audit_chain_verify()
    assert kinds(report) == ["unsealed"]
    assert str(report.problems[0]).startswith(
        "seq 1015: row not in the chain — inserted after its period was sealed"
    )


def test_a_row_committed_late_is_sealed_by_the_next_checkpoint(log_with_a_gap):
    # Its transaction took seq 1015 before 1020 was taken, and committed after the seal.
    make_events(1, seqs=[1015], start=timezone.now())
    report = audit_chain_verify()
    assert report.ok and report.pending == 1
    checkpoint = audit_chain_seal()
    assert (checkpoint.event_count, checkpoint.first_seq) == (1, 1015)
    assert audit_chain_verify().ok


def test_the_sealer_stopping_is_reported(sealed_log):
    later = timezone.now() + timedelta(hours=1)
    report = audit_chain_verify(now=later)
    assert kinds(report) == ["stale"]
    assert "no checkpoint since checkpoint 4" in str(report.problems[0])


def test_a_range_is_verified_by_the_periods_it_overlaps(sealed_log):
    with tampering():
        AuditEvent.objects.filter(seq=sealed_log[5]).update(status=204)
    assert kinds(audit_chain_verify(start=sealed_log[30], end=sealed_log[59])) == []
    report = audit_chain_verify(start=sealed_log[0], end=sealed_log[10])
    assert kinds(report) == ["edited"]
    assert report.checkpoints == 1


def test_a_range_can_be_given_as_dates(sealed_log):
    today = timezone.now().date().isoformat()
    assert audit_chain_verify(start=today).ok
    with pytest.raises(ValueError, match="neither a sequence number nor a date"):
        audit_chain_verify(start="last tuesday")


def test_the_verify_command_says_ok_and_exits_zero(sealed_log):
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert out.getvalue().startswith("audit chain OK: 90 rows, 90 links (positions 1–90)")


def test_the_verify_command_lists_each_problem_and_exits_non_zero(sealed_log):
    with tampering():
        AuditEvent.objects.filter(seq=sealed_log[1]).delete()
        AuditEvent.objects.filter(seq=sealed_log[2]).update(path="/x/")
    err = StringIO()
    with pytest.raises(CommandError, match="2 problem"):
        call_command("audit_verify", stdout=StringIO(), stderr=err)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"PROBLEM deleted: seq {sealed_log[1]}: row deleted")
    assert lines[1].startswith(f"PROBLEM edited: seq {sealed_log[2]}: row edited")


def test_the_verify_command_takes_from_and_to(sealed_log):
    out = StringIO()
    call_command("audit_verify", "--from", str(sealed_log[61]), "--to", "99999", stdout=out)
    assert "30 rows" in out.getvalue() and "1 checkpoints" in out.getvalue()
    with pytest.raises(CommandError, match="neither a sequence number"):
        call_command("audit_verify", "--from", "soon", stdout=StringIO())


def test_the_seal_command_records_itself_and_seals(db):
    out = StringIO()
    call_command("audit_seal", stdout=out)
    assert out.getvalue().startswith("checkpoint 1: 1 rows sealed")
    assert AuditEvent.objects.get().actor_username == "system:audit_seal"


def test_system_rows_are_sealed_like_any_other(db):
    audit_record_system(name="instances.reconcile", action="instance.repair", object_ref="i-1")
    assert audit_chain_seal().event_count == 1
    assert audit_chain_verify().ok


def test_the_beat_task_seals_and_names_its_checkpoint(db):
    make_events(3)
    assert seal_audit_chain() == 1
    assert seal_audit_chain() == 2


def test_a_sealer_that_loses_the_race_reports_no_checkpoint(db, monkeypatch):
    def lose(**kwargs):
        raise IntegrityError("duplicate key value violates unique constraint")

    monkeypatch.setattr("audit.services.audit_chain_seal", lose)
    assert seal_audit_chain() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sealers_at_once_leave_one_consistent_chain():
    make_events(200)
    barrier = threading.Barrier(2)
    outcomes = []

    def seal():
        try:
            barrier.wait(5)
            outcomes.append(seal_audit_chain())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=seal) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) in ([0, 1], [1, 2])
    assert AuditChainLink.objects.count() == 200
    assert audit_chain_verify().ok
