"""Audit's periodic tasks: thin wrappers around services (docs/design.md rule 4).

The sealer does not write an audit row per tick (its checkpoint is its record); export and
retention write one when they changed something.
"""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError
from celery import shared_task
from django.db import IntegrityError

from audit import services

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def seal_audit_chain() -> int:
    """Seal new rows and sign a checkpoint; returns the checkpoint number."""
    try:
        return services.audit_chain_seal().number
    except IntegrityError:
        # Another sealer committed the same checkpoint number first; its checkpoint covers
        # what this one would have sealed, and the next tick carries on from it.
        log.info("audit: another sealer won this tick")
        return 0


@shared_task(
    acks_late=True,
    autoretry_for=(BotoCoreError, ClientError),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=5,
)
def export_audit_log() -> int:
    """Export sealed periods not yet in S3 (a no-op when PORTAL_AUDIT_S3_BUCKET is empty)."""
    return services.audit_export_pending()


@shared_task(acks_late=True)
def apply_audit_retention() -> int:
    """Delete whole sealed periods older than the retention setting; returns rows deleted."""
    prune = services.audit_retention_apply()
    return prune.events_deleted if prune else 0
