"""The tail of the chain, witnessed outside the database.

Whoever owns the database can delete the newest checkpoints together with their links and
rows: the chain left behind verifies by itself, before the next seal and after it. Every
committed checkpoint is also appended to the witness file (a test's own, see
tests/conftest.py) and the log stream, and ``audit_verify`` names the checkpoints and rows the
witness saw that the database no longer holds.

The log is the hour of tests/audit/conftest.py: checkpoints 1-12, every five minutes up to
midnight, five rows each but the quiet third, 55 positions in all.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from audit.lib import chain
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent
from audit.services import audit_chain_seal, audit_retention_apply
from audit.services.verify import audit_chain_verify
from tests.audit.conftest import MIDNIGHT, PERIOD, make_events, tampering

pytestmark = pytest.mark.django_db


def lines(report) -> list[str]:
    return [f"{problem.kind}: {problem}" for problem in report.problems]


def witness_lines() -> list[dict]:
    return [json.loads(line) for line in Path(settings.PORTAL_AUDIT_WITNESS_PATH).open()]


def delete_newest_checkpoints(count: int) -> list[int]:
    """What the database's owner can do: delete the newest checkpoints, every link they
    sealed and the rows behind those links. Returns the rows' numbers."""
    newest = list(AuditCheckpoint.objects.order_by("-number")[:count])
    first_position = min(checkpoint.first_position for checkpoint in newest)
    links = AuditChainLink.objects.filter(position__gte=first_position)
    gone = sorted(links.values_list("event_seq", flat=True))
    with tampering():
        AuditEvent.objects.filter(seq__in=gone).delete()
        links.delete()
        AuditCheckpoint.objects.filter(number__in=[c.number for c in newest]).delete()
    return gone


@pytest.fixture
def seal(clock, django_capture_on_commit_callbacks):
    """Seal at a moment, committed (so the checkpoint is witnessed), as beat's next tick."""

    def at(moment):
        clock.move_to(moment)
        with django_capture_on_commit_callbacks(execute=True):
            return audit_chain_seal()

    return at


def test_every_committed_checkpoint_is_appended_to_the_witness_and_logged(hour, seal, caplog):
    assert [(d["number"], d["signature"]) for d in witness_lines()] == list(
        AuditCheckpoint.objects.order_by("number").values_list("number", "signature")
    )
    with caplog.at_level(logging.INFO, logger="audit.witness"):
        checkpoint = seal(MIDNIGHT + PERIOD)
    assert witness_lines()[-1] == chain.checkpoint_document(checkpoint)
    assert (
        f"audit checkpoint 13 witnessed: positions 56–55, no rows, head {checkpoint.head_hash}, "
        "sealed 2026-12-01T00:05:00.000000Z"
    ) in caplog.text
    report = audit_chain_verify()
    assert report.ok and report.witnessed == 13


def test_a_seal_that_rolls_back_leaves_no_line_in_the_witness(hour, clock):
    clock.move_to(MIDNIGHT + PERIOD)
    with pytest.raises(IntegrityError), transaction.atomic():
        audit_chain_seal()
        raise IntegrityError("another sealer committed checkpoint 13 first")
    assert [d["number"] for d in witness_lines()] == list(range(1, 13))


def test_deleting_the_newest_checkpoint_with_its_rows_is_found_from_the_witness(hour):
    assert audit_chain_verify().ok
    gone = delete_newest_checkpoints(1)
    assert gone == hour.periods[11]
    assert lines(audit_chain_verify()) == [
        f"tail_deleted: checkpoint 12 deleted with the rows they sealed — the witness saw "
        "checkpoint 12 seal the chain up to position 55 at 2026-12-01 00:00:00 UTC, but the "
        "database agrees with it only up to checkpoint 11 (position 50): positions 51–55, 5 "
        f"rows, are missing (checkpoint 12: seq {gone[0]}–{gone[-1]}, 5 rows, all gone)"
    ]


def test_deleting_the_newest_five_checkpoints_with_their_rows_is_found_from_the_witness(hour):
    gone = delete_newest_checkpoints(5)
    assert len(gone) == 25
    report = audit_chain_verify()
    # The sealer's silence since 23:35 shows too, but says neither which rows nor how many.
    assert [problem.kind for problem in report.problems] == ["stale", "tail_deleted"]
    listed = "; ".join(
        f"checkpoint {8 + index}: seq {seqs[0]}–{seqs[-1]}, 5 rows, all gone"
        for index, seqs in enumerate(hour.periods[7:])
    )
    assert str(report.problems[1]) == (
        "checkpoints 8–12 deleted with the rows they sealed — the witness saw checkpoint 12 "
        "seal the chain up to position 55 at 2026-12-01 00:00:00 UTC, but the database agrees "
        "with it only up to checkpoint 7 (position 30): positions 31–55, 25 rows, are missing "
        f"({listed})"
    )


@pytest.mark.parametrize("count", [1, 5])
def test_a_deleted_tail_stays_found_after_new_rows_are_sealed_on_top(
    hour, seal, count, api_as, fin, projects
):
    """Five real PUT /budgets/ calls are the newest checkpoint's rows; the owner deletes it
    (or the newest five) with them, and beat seals the next calls on top."""
    for amount in range(5):
        answer = api_as(fin).put(
            "/api/v1/budgets/vision-lab/", {"monthly_amount": f"{2500 + amount}.00"}, format="json"
        )
        assert answer.status_code == 200
    thirteen = seal(MIDNIGHT + PERIOD)
    puts = list(
        AuditEvent.objects.filter(method="PUT", path="/api/v1/budgets/vision-lab/")
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert len(puts) == 5 and thirteen.last_seq == puts[-1]
    gone = delete_newest_checkpoints(count)
    assert set(puts) <= set(gone)
    first_lost = 14 - count
    make_events(3, start=MIDNIGHT + PERIOD + timedelta(seconds=20))
    again = seal(MIDNIGHT + 2 * PERIOD)
    assert again.number == first_lost  # signed on top of what is left, under a number reused

    report = audit_chain_verify()
    assert [problem.kind for problem in report.problems] == ["tail_deleted"]
    message = str(report.problems[0])
    numbers = "checkpoint 13" if count == 1 else "checkpoints 9–13"
    assert message.startswith(
        f"{numbers} deleted with the rows they sealed — the witness saw checkpoint 13 seal "
        f"the chain up to position {thirteen.last_position} at 2026-12-01 00:05:00 UTC"
    )
    assert f"{len(gone)} rows, are missing" in message
    assert f"checkpoint 13: seq {puts[0]}–{puts[-1]}, {thirteen.event_count} rows, all gone" in (
        message
    )
    assert message.endswith(f"the database's checkpoint {first_lost} was signed again on top")


def test_the_verify_command_names_the_deleted_tail_and_exits_non_zero(hour):
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert f"witness {settings.PORTAL_AUDIT_WITNESS_PATH}: up to checkpoint 12" in out.getvalue()
    delete_newest_checkpoints(1)
    err = StringIO()
    with pytest.raises(CommandError, match="1 problem"):
        call_command("audit_verify", stdout=StringIO(), stderr=err)
    assert err.getvalue().startswith("PROBLEM tail_deleted: checkpoint 12 deleted with the rows")


def test_a_witness_line_edited_without_the_key_is_reported(hour):
    path = Path(settings.PORTAL_AUDIT_WITNESS_PATH)
    documents = witness_lines()
    documents[-1]["last_position"] = 54
    path.write_text("".join(json.dumps(d) + "\n" for d in documents) + "{not json\n")
    assert lines(audit_chain_verify()) == [
        f"witness_unreadable: witness {path}, line 13: not a checkpoint document — the "
        "witness was edited or its write was cut short",
        f"witness_forged: witness {path}: its line for checkpoint 12 does not verify with "
        "PORTAL_AUDIT_SIGNING_KEY — the witness was edited",
    ]


def test_a_witness_that_could_not_be_written_is_behind_not_damage(hour, seal, settings, caplog):
    settings.PORTAL_AUDIT_WITNESS_PATH = "/proc/no-such-place/audit-witness.jsonl"
    with caplog.at_level(logging.ERROR, logger="audit.witness"):
        seal(MIDNIGHT + PERIOD)
    assert "could not append checkpoint 13 to the witness" in caplog.text
    assert AuditCheckpoint.objects.filter(number=13).exists()
    assert audit_chain_verify().ok


def test_periods_removed_by_retention_are_not_reported_missing(hour, seal):
    seal(MIDNIGHT + PERIOD)
    assert audit_retention_apply(now=MIDNIGHT + timedelta(days=2), days=1) is not None
    assert not AuditCheckpoint.objects.filter(number__lte=12).exists()
    assert audit_chain_verify(now=MIDNIGHT + PERIOD).ok
