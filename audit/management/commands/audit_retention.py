"""Delete whole sealed audit periods older than PORTAL_AUDIT_RETENTION_DAYS."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from audit.services import audit_retention_apply


class Command(BaseCommand):
    help = (
        "Delete whole sealed audit periods older than PORTAL_AUDIT_RETENTION_DAYS (and already "
        "exported, when S3 export is on), leaving a signed record of what was removed."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help=f"keep this many days instead (default {settings.PORTAL_AUDIT_RETENTION_DAYS})",
        )

    def handle(self, *args, days=None, **options):
        prune = audit_retention_apply(days=days)
        if prune is None:
            self.stdout.write("nothing is old enough to delete")
            return
        self.stdout.write(
            f"deleted {prune.events_deleted} rows: every period through checkpoint "
            f"{prune.through_checkpoint} (position {prune.through_position})"
        )
