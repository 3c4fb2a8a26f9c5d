"""Seal new audit rows into the hash chain now (beat does it every PORTAL_AUDIT_SEAL_SECONDS)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from audit.services import audit_chain_seal, audit_record_system


class Command(BaseCommand):
    help = "Seal every audit row not yet in the hash chain and sign a checkpoint."

    def handle(self, *args, **options):
        audit_record_system(name="audit_seal", kind="command", action="audit.seal")
        checkpoint = audit_chain_seal()
        self.stdout.write(
            f"checkpoint {checkpoint.number}: {checkpoint.event_count} rows sealed, positions "
            f"{checkpoint.first_position}–{checkpoint.last_position}, head {checkpoint.head_hash}"
        )
