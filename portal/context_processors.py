"""What the navigation bar needs on every page."""

from __future__ import annotations

from portal.models import Membership, Notice


def navigation(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or request.headers.get("HX-Request"):
        return {}  # htmx fragments (polled every few seconds) draw no navigation
    return {
        "nav_is_approver": user.is_portal_admin
        or Membership.objects.filter(user=user, role=Membership.Role.MANAGER).exists(),
        "nav_unread": Notice.objects.filter(user=user, read_at__isnull=True).count(),
    }
