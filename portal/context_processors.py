"""What the navigation bar needs on every page; who may see which link is portal.permissions'."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from portal import permissions


def navigation(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.headers.get("HX-Request"):
        return {}  # htmx fragments (polled every few seconds) draw no navigation
    approver = permissions.is_approver(user)
    return {
        "nav_is_approver": approver,
        # The badge on Approvals: held orders this person may decide (counted by instances).
        "nav_approvals_waiting": (
            import_string(settings.PORTAL_APPROVALS_WAITING)(user) if approver else 0
        ),
        "nav_can_order": permissions.can_order(user),
        "nav_sets_quotas": permissions.can_set_quotas(user),
        "nav_reads_audit_log": permissions.can_read_audit_log(user),
        "nav_is_admin": permissions.is_admin(user),
    }
