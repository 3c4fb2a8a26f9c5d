"""Export sealed audit periods to S3 now (beat does it hourly)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.models import AuditCheckpoint
from audit.services import audit_record_system
from audit.services.export import audit_export_pending, audit_export_period


class Command(BaseCommand):
    help = (
        "Write sealed audit periods to s3://PORTAL_AUDIT_S3_BUCKET as JSON Lines plus their "
        "signed checkpoints. Re-exporting a period overwrites the same keys."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--checkpoint",
            type=int,
            action="append",
            help="export (again) this checkpoint's period; repeatable",
        )

    def handle(self, *args, checkpoint=None, **options):
        if not settings.PORTAL_AUDIT_S3_BUCKET:
            raise CommandError("PORTAL_AUDIT_S3_BUCKET is empty: S3 export is off.")
        if checkpoint:
            found = list(AuditCheckpoint.objects.filter(number__in=checkpoint))
            missing = sorted(set(checkpoint) - {row.number for row in found})
            if missing:
                raise CommandError(f"no checkpoint {', '.join(map(str, missing))}")
            for row in found:
                audit_export_period(checkpoint=row)
            audit_record_system(
                name="audit_export",
                kind="command",
                action="audit.export",
                summary={"checkpoints": sorted(checkpoint)},
            )
            self.stdout.write(f"exported {len(found)} period(s)")
            return
        count = audit_export_pending()
        self.stdout.write(f"exported {count} period(s)")
