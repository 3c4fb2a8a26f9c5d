"""audit/services/: the writers of the audit log (docs/design.md rule 1), one module per topic,
the writers other apps and the tasks call re-exported here:

- events: the rows themselves (the middleware's insert, ``audit_record_system`` for tasks and
  commands, ``audit_set_actor`` and ``audit_set_object`` for views)
- chain: the sealer, linking new rows into the hash chain under a signed checkpoint
- witness: every checkpoint published outside the database, and checked against it
- verify: ``audit_chain_verify``, walking the chain and its checkpoints (read-only);
  verify_rows is its third pass, every row against its link and its period
- retention: deleting whole sealed periods past their time, with a signed prune record
- export: sealed periods written to S3

The hash arithmetic they share is audit/lib/chain.py; the reads, audit/selectors/.
"""

from audit.services.chain import SEAL_BATCH, STRAGGLER_CHECKPOINTS, audit_chain_seal
from audit.services.events import (
    app_version,
    audit_event_insert,
    audit_record_system,
    audit_set_actor,
    audit_set_object,
    body_digest,
)
from audit.services.export import audit_export_pending, audit_export_period
from audit.services.retention import audit_retention_apply
from audit.services.verify import audit_chain_verify

__all__ = [
    "SEAL_BATCH",
    "STRAGGLER_CHECKPOINTS",
    "app_version",
    "audit_chain_seal",
    "audit_chain_verify",
    "audit_event_insert",
    "audit_export_pending",
    "audit_export_period",
    "audit_record_system",
    "audit_retention_apply",
    "audit_set_actor",
    "audit_set_object",
    "body_digest",
]
