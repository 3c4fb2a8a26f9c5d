"""What the navigation bar needs on every page; who may see which link is portal.permissions'."""

from __future__ import annotations

from portal import permissions


def navigation(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.headers.get("HX-Request"):
        return {}  # htmx fragments (polled every few seconds) draw no navigation
    return {
        # The badge on Approvals is counted by instances, in base.html ({% approvals_waiting %}).
        "nav_is_approver": permissions.is_approver(user),
        "nav_can_order": permissions.can_order(user),
        "nav_sets_quotas": permissions.can_set_quotas(user),
        "nav_reads_audit_log": permissions.can_read_audit_log(user),
        "nav_is_admin": permissions.is_admin(user),
        "nav_has_webhooks": permissions.webhook_projects(user).exists(),
    }
