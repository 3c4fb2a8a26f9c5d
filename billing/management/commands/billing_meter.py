"""Meter usage now (what beat does every PORTAL_METER_SECONDS), or repair the rollups."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from billing.services.metering import usage_meter
from billing.services.rollups import rollups_rebuild, rollups_refresh


class Command(BaseCommand):
    help = (
        "Meter every host that needs it and roll up the days that changed. --full recomputes "
        "every host's usage from its events; --rebuild-rollups rebuilds every daily rollup."
    )

    def add_arguments(self, parser):
        parser.add_argument("--full", action="store_true", help="re-meter every host from scratch")
        parser.add_argument(
            "--rebuild-rollups", action="store_true", help="rebuild all rollups from usage rows"
        )

    def handle(self, *args, **options):
        report = usage_meter(full=options["full"])
        self.stdout.write(
            f"Metered {report.instances} host(s): {report.written} usage row(s) written, "
            f"{report.deleted} removed."
        )
        if options["rebuild_rollups"]:
            self.stdout.write(f"Rebuilt the rollups: {rollups_rebuild()} row(s).")
        else:
            self.stdout.write(f"Rolled up {rollups_refresh()} changed (day, project) pair(s).")
