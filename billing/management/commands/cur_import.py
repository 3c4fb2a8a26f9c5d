"""Compare an AWS Cost and Usage Report with metered usage, from a file or S3."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from billing.services.cur import cur_import, cur_import_message, cur_import_s3


class Command(BaseCommand):
    help = "Import a CUR (CSV or CSV.gz): a path, or s3://bucket/key. Prints the result."

    def add_arguments(self, parser):
        parser.add_argument("report", help="path to the CUR file, or s3://bucket/key")

    def handle(self, *args, **options):
        where = options["report"]
        try:
            if where.startswith("s3://"):
                bucket, _, key = where.removeprefix("s3://").partition("/")
                imported = cur_import_s3(bucket=bucket, key=key, actor=None)
            else:
                path = Path(where)
                if not path.is_file():
                    raise CommandError(f"{where} is not a file.")
                imported = cur_import(
                    data=path.read_bytes(), source=f"file:{path.name}", actor=None
                )
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from None
        counts = {k: v["count"] for k, v in imported.summary["by_status"].items()}
        self.stdout.write(
            f"Reconciliation {imported.pk}: {imported.first_day} to {imported.last_day}, "
            + ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items())
        )
        self.stdout.write(cur_import_message(imported))
