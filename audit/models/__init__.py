"""The audit log: one row per audited call, and the hash chain that proves nobody edited it.

Every table here is append-only. On PostgreSQL a trigger (migration 0002) refuses UPDATE,
DELETE and TRUNCATE; only the retention service may delete, and only whole sealed periods.
That is why the chain's hashes live in their own table (``AuditChainLink``) instead of a column
on the event: sealing an event must not update it.

The audit app imports no other app of the portal (docs/design.md rule 9: imports run one way),
so the actor is kept as a plain id with a snapshot of the username and role, never as a foreign
key: the row must outlive the user and must never be rewritten by ``on_delete``.

One module per topic, every model re-exported here (``from audit.models import AuditEvent``):

- events: ``AuditEvent``, its ``Outcome`` and ``for_user``
- chain: ``AuditChainLink`` and ``AuditCheckpoint``
- retention: ``AuditPrune``
- export: ``AuditExport``
"""

from audit.models.chain import AuditChainLink, AuditCheckpoint
from audit.models.events import SYSTEM_ACTOR_PREFIX, AuditEvent, AuditEventQuerySet, Outcome
from audit.models.export import AuditExport
from audit.models.retention import AuditPrune

__all__ = [
    "SYSTEM_ACTOR_PREFIX",
    "AuditChainLink",
    "AuditCheckpoint",
    "AuditEvent",
    "AuditEventQuerySet",
    "AuditExport",
    "AuditPrune",
    "Outcome",
]
