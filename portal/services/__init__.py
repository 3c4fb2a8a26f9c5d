"""Writers for people and projects (docs/design.md rule 1: services are the only writers), one topic
file each: people, quotas, policies, notices, tokens. Callers import from here."""

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
    project_save,
    project_upsert,
    user_upsert,
)
from portal.services.policies import (
    APPROVAL_EXPIRY_MAX_DAYS,
    APPROVAL_POLICY_FIELDS,
    IDLE_POLICY_FIELDS,
    approval_policy_set,
    idle_policy_set,
)
from portal.services.quotas import (
    QUOTA_FIELDS,
    QUOTA_REQUEST_GPUS_RULE,
    QUOTA_REQUEST_MOST_GPUS,
    limits_moved,
    quota_delete,
    quota_request_decide,
    quota_request_open,
    quota_request_topic,
    quota_set,
    quota_values_clean,
)
from portal.services.tokens import (
    TOKEN_PREFIX,
    token_authenticate,
    token_digest,
    token_issue,
    token_revoke,
)

__all__ = [
    "APPROVAL_EXPIRY_MAX_DAYS",
    "APPROVAL_POLICY_FIELDS",
    "IDLE_POLICY_FIELDS",
    "QUOTA_FIELDS",
    "QUOTA_REQUEST_GPUS_RULE",
    "QUOTA_REQUEST_MOST_GPUS",
    "TOKEN_PREFIX",
    "approval_policy_set",
    "idle_policy_set",
    "limits_moved",
    "membership_remove",
    "membership_set",
    "notice_dismiss",
    "notice_send",
    "notices_close",
    "notices_mark_read",
    "project_save",
    "project_upsert",
    "quota_delete",
    "quota_request_decide",
    "quota_request_open",
    "quota_request_topic",
    "quota_set",
    "quota_values_clean",
    "token_authenticate",
    "token_digest",
    "token_issue",
    "token_revoke",
    "user_upsert",
]
