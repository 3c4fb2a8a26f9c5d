"""`manage.py beat_health`: exit 1 when beat has not sent a periodic task within two of its
periods (the beat container's health check in docker-compose.yml)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from portal.lib.celery_ops import beat_state


class Command(BaseCommand):
    help = "Exit 0 when beat is alive (every periodic task sent within two periods), else 1."

    def handle(self, *args, **options) -> None:
        state = beat_state()
        if not state.ok:
            raise CommandError(f"beat is stale: {state.reason}")
        self.stdout.write("beat ok")
