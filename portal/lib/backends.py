"""The role backend: Django's ``user.has_perm(...)`` answered from portal/permissions.py.

Apps below portal (audit) may not import its rules, so they ask Django's own question, and this
backend answers the permissions a role gives. It stands after axes and before ``ModelBackend``
in AUTHENTICATION_BACKENDS, and signs nobody in: it takes no credentials (so Django never asks
it to check a password) and has no ``get_user`` (so the test client's ``force_login`` and the
session never pick it, as they would Django's ``BaseBackend``).

For a permission listed in ``ROLE_PERMISSIONS`` the role's answer is final: a no raises
PermissionDenied, which Django takes as the end of the question, so a permission granted to one
user in the Django admin cannot widen what the role allows (docs/design.md rule 10: one answer
per question). Every other permission is left to ModelBackend. An active superuser has every
permission before any backend is asked, as the rules say too (an admin).
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied

from audit.lib.access import READ_WHOLE_LOG
from portal import permissions

# Django permission -> the rule that answers it for a user.
ROLE_PERMISSIONS: dict[str, Callable[[object], bool]] = {
    READ_WHOLE_LOG: permissions.can_read_audit_log,
}


class RoleBackend:
    def authenticate(self, request) -> None:
        return None

    async def aauthenticate(self, request) -> None:
        return None

    def has_perm(self, user_obj, perm: str, obj=None) -> bool:
        rule = ROLE_PERMISSIONS.get(perm)
        if rule is None:
            return False
        if rule(user_obj):
            return True
        raise PermissionDenied

    async def ahas_perm(self, user_obj, perm: str, obj=None) -> bool:
        return await sync_to_async(self.has_perm)(user_obj, perm, obj)
