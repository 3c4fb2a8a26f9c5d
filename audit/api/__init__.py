"""REST API for the audit log: ``GET /api/v1/audit/events/`` (admins only).

``views`` holds the viewset and its permission, ``serializers`` the shapes; the filter is
``audit.filters``, shared with the pages.
"""

from audit.api.views import AuditEventViewSet

__all__ = ["AuditEventViewSet"]
