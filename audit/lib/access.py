"""Who reads the whole audit log. audit sits below every app, so it asks Django's own question,
``user.has_perm("audit.view_auditevent")``; the project's authentication backends answer it
(portal.lib.backends.RoleBackend, from the rules of portal/permissions.py)."""

from __future__ import annotations

# The Django permission of the AuditEvent model that stands for reading the whole log.
READ_WHOLE_LOG = "audit.view_auditevent"


def reads_whole_log(user) -> bool:
    """Everyone else reads only their own activity."""
    return bool(user is not None and user.has_perm(READ_WHOLE_LOG))
