"""Verify the audit log's hash chain and checkpoints; exit non-zero on any problem."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.services.verify import audit_chain_verify


class Command(BaseCommand):
    help = (
        "Walk the audit hash chain and its signed checkpoints and report every problem by "
        "sequence number, rows inserted by hand included (numbered below 1, backdated, "
        "postdated, slipped into the sealed range, out of order, never sealed), and the "
        "newest checkpoints deleted with their rows (compared with the witness). A range checks "
        "every checkpoint that covers it and every row it selects. Exit status 1 when anything "
        "does not verify."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--from",
            dest="start",
            help="first sequence number or date/time (ISO 8601) to verify; default: the start",
        )
        parser.add_argument(
            "--to",
            dest="end",
            help="last sequence number or date/time (ISO 8601) to verify; default: the end",
        )

    def handle(self, *args, start=None, end=None, **options):
        try:
            report = audit_chain_verify(start=start, end=end)
        except ValueError as error:
            raise CommandError(str(error)) from None
        span = (
            f"positions {report.first_position}–{report.last_position}"
            if report.links
            else "no sealed rows"
        )
        summary = (
            f"{report.rows} rows, {report.links} links ({span}), {report.checkpoints} "
            f"checkpoints checked in {report.seconds:.2f} s; {report.pending} rows await sealing"
        )
        if report.witnessed is not None:
            summary += f"; witness {report.witness_path}: up to checkpoint {report.witnessed}"
        elif not (start or end):
            # Not a problem (a new deployment has no witness yet), but the tail is unchecked.
            where = report.witness_path or "PORTAL_AUDIT_WITNESS_PATH (empty)"
            summary += f"; no witnessed checkpoint at {where}, so a deleted tail cannot be seen"
        if report.ok:
            self.stdout.write(self.style.SUCCESS(f"audit chain OK: {summary}"))
            return
        for problem in report.problems:
            self.stderr.write(f"PROBLEM {problem.kind}: {problem.message}")
        self.stdout.write(summary)
        raise CommandError(f"audit chain does not verify: {len(report.problems)} problem(s)")
