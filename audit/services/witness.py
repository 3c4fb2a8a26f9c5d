"""The checkpoints' witness: every signed checkpoint, published outside the database.

A chain kept inside the database cannot witness its own tail. Whoever may delete rows (the
database's owner can drop the append-only trigger) can delete the newest checkpoints together
with their links and rows: what is left is a shorter chain that verifies, and the next seal
signs on top of it. So every checkpoint, once its seal has committed, is also appended to
``PORTAL_AUDIT_WITNESS_PATH`` (one JSON document a line, as ``chain.checkpoint_document``
writes it) and written to the log stream (logger ``audit.witness``), the way CloudTrail
publishes its digest files; in production the S3 export under Object Lock holds the same
documents. ``audit_verify`` compares the chain with the witness (:func:`witness_check`) and
names the checkpoints and rows it saw that the database no longer has.

The witness is written after the commit, never inside the seal's transaction: a seal that
rolls back (a sealer that lost the race) must leave no line, or the witness would claim a
checkpoint that never existed. A seal whose process dies between its commit and the write
leaves the witness one checkpoint behind, which is never mistaken for damage.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from audit.lib import chain
from audit.models import AuditCheckpoint, AuditEvent

log = logging.getLogger("audit.witness")

# How many missing checkpoints a problem lists one by one before it summarises the rest.
LISTED = 10


def witness_path() -> Path | None:
    path = settings.PORTAL_AUDIT_WITNESS_PATH
    return Path(path) if path else None


def witness_publish_on_commit(checkpoint: AuditCheckpoint) -> None:
    """Publish ``checkpoint`` once the transaction that wrote it commits."""
    document = chain.checkpoint_document(checkpoint)
    transaction.on_commit(lambda: witness_publish(document))


def witness_publish(document: dict[str, Any]) -> None:
    """Append one committed checkpoint to the witness file and the log stream.

    The seal has committed by now, so a failure here cannot undo it: it is logged as an error
    (the witness then lacks that checkpoint, which ``audit_verify`` tolerates; the next
    checkpoint is witnessed again)."""
    line = json.dumps(document, separators=(",", ":"), sort_keys=True)
    # The log's redaction hides anything named a signature, so the log stream carries the
    # head hash, which pins the chain just as well.
    log.info(
        "audit checkpoint %d witnessed: positions %d–%d, %s, head %s, sealed %s",
        document["number"],
        document["first_position"],
        document["last_position"],
        _seqs(document["first_seq"], document["last_seq"]),
        document["head_hash"],
        document["period_end"],
    )
    path = witness_path()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: each line lands at the end even with two sealers' processes writing.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        log.error(
            "audit: could not append checkpoint %d to the witness %s: %s",
            document["number"],
            path,
            error,
        )


@dataclass
class Witness:
    """What the witness file says: the first document it holds for each checkpoint number
    (a later line for the same number is a checkpoint signed again on top of a deleted one),
    and the lines it could not trust."""

    path: Path | None
    documents: dict[int, dict[str, Any]] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)  # line numbers
    forged: list[int] = field(default_factory=list)  # checkpoint numbers

    @property
    def latest(self) -> int | None:
        return max(self.documents, default=None)


def witness_read(key: bytes) -> Witness:
    path = witness_path()
    witness = Witness(path=path)
    if path is None or not path.exists():
        return witness
    with path.open(encoding="utf-8") as lines:
        for index, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
                number = int(document["number"])
                genuine = chain.document_signature_valid(document, key)
            except (ValueError, KeyError, TypeError):
                witness.unreadable.append(index)
                continue
            if not genuine:
                witness.forged.append(number)
                continue
            witness.documents.setdefault(number, document)
    return witness


def _seqs(first: int | None, last: int | None) -> str:
    if first is None:
        return "no rows"
    return f"seq {first}" if first == last else f"seq {first}–{last}"


def _numbers(first: int, last: int) -> str:
    return f"checkpoint {first}" if first == last else f"checkpoints {first}–{last}"


def _lost_rows(document: dict[str, Any]) -> str:
    """What one witnessed checkpoint sealed, and how much of it the database still has."""
    count = document["event_count"]
    if count == 0:
        return f"checkpoint {document['number']}: no rows"
    first, last = document["first_seq"], document["last_seq"]
    left = AuditEvent.objects.filter(seq__gte=first, seq__lte=last).count()
    rows = "1 row" if count == 1 else f"{count} rows"
    state = "all gone" if left == 0 else f"{left} still in the database"
    return f"checkpoint {document['number']}: {_seqs(first, last)}, {rows}, {state}"


def witness_check(report, *, after: int) -> None:
    """Compare the database's checkpoints numbered above ``after`` (the retention anchor)
    with the witness, and add what disagrees to ``report``.

    Every witnessed checkpoint past the newest one the database still holds unchanged was
    deleted, and with it the rows it sealed (a checkpoint with its number that the database
    holds now was signed again on top). One the database lacks below that is reported by the
    chain's own check (``checkpoint_deleted``); one it holds with another signature was
    signed again in place.
    """
    key = chain.signing_key()
    witness = witness_read(key)
    report.witness_path = str(witness.path) if witness.path else None
    for index in witness.unreadable:
        report.add(
            "witness_unreadable",
            None,
            f"witness {witness.path}, line {index}: not a checkpoint document — the witness "
            "was edited or its write was cut short",
        )
    for number in witness.forged:
        report.add(
            "witness_forged",
            None,
            f"witness {witness.path}: its line for checkpoint {number} does not verify with "
            "PORTAL_AUDIT_SIGNING_KEY — the witness was edited",
        )
    documents = {n: d for n, d in witness.documents.items() if n > after}
    report.witnessed = witness.latest
    if not documents:
        return
    held = dict(
        AuditCheckpoint.objects.filter(number__in=list(documents)).values_list(
            "number", "signature"
        )
    )
    agreed = [n for n, document in documents.items() if held.get(n) == document["signature"]]
    top = max(agreed, default=after)
    for number in sorted(n for n in documents if n < top and n in held and n not in agreed):
        document = documents[number]
        report.add(
            "witness_mismatch",
            document["first_seq"],
            f"checkpoint {number} ({_seqs(document['first_seq'], document['last_seq'])}): "
            "signed again — the database's checkpoint is not the one the witness saw "
            f"(signature {document['signature'][:12]}…)",
        )
    lost = sorted(n for n in documents if n > top)
    if not lost:
        return
    first, last = documents[lost[0]], documents[lost[-1]]
    rows = sum(documents[n]["event_count"] for n in lost)
    parts = [_lost_rows(documents[n]) for n in lost[:LISTED]]
    if len(lost) > LISTED:
        parts.append(f"and {len(lost) - LISTED} more")
    resealed = [n for n in lost if n in held]
    again = (
        f"; the database's {_numbers(resealed[0], resealed[-1])} "
        f"{'was' if len(resealed) == 1 else 'were'} signed again on top"
        if resealed
        else ""
    )
    agreed_up_to = (
        f"checkpoint {top} (position {documents[top]['last_position']})"
        if top in documents
        else "none of its checkpoints"
    )
    seqs = [documents[n]["first_seq"] for n in lost if documents[n]["first_seq"] is not None]
    report.add(
        "tail_deleted",
        min(seqs) if seqs else None,
        f"{_numbers(lost[0], lost[-1])} deleted with the rows they sealed — the witness "
        f"saw checkpoint {last['number']} seal the chain up to position "
        f"{last['last_position']} at {last['period_end'].replace('T', ' ')[:19]} UTC, but "
        f"the database agrees with it only up to {agreed_up_to}: positions "
        f"{first['first_position']}–{last['last_position']}, {rows} rows, are missing "
        f"({'; '.join(parts)}){again}",
    )
