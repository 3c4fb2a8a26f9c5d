"""Writers for people and projects (docs/design.md rule 1: services are the only writers),
one topic file each: people, notices, tokens, webhooks. Callers import from here. (Quotas and
the approval and idle policies are instances', in instances/services/.)"""

from __future__ import annotations

from portal.services.notices import (
    notice_dismiss,
    notice_send,
    notices_close,
    notices_mark_read,
)
from portal.services.people import (
    membership_remove,
    membership_set,
    project_isolation_set,
    project_save,
    project_upsert,
    user_upsert,
)
from portal.services.tokens import (
    TOKEN_PREFIX,
    token_authenticate,
    token_digest,
    token_issue,
    token_revoke,
)
from portal.services.webhooks import (
    webhook_create,
    webhook_delete,
    webhook_deliver,
    webhook_emit,
    webhook_resend,
    webhook_secret_rotate,
    webhook_update,
    webhooks_deliver_due,
)

__all__ = [
    "TOKEN_PREFIX",
    "membership_remove",
    "membership_set",
    "notice_dismiss",
    "notice_send",
    "notices_close",
    "notices_mark_read",
    "project_isolation_set",
    "project_save",
    "project_upsert",
    "token_authenticate",
    "token_digest",
    "token_issue",
    "token_revoke",
    "user_upsert",
    "webhook_create",
    "webhook_delete",
    "webhook_deliver",
    "webhook_emit",
    "webhook_resend",
    "webhook_secret_rotate",
    "webhook_update",
    "webhooks_deliver_due",
]
