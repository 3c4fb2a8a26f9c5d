"""audit/api/: the audit log's API, one module per topic (events: ``GET /api/v1/audit/events/``,
admins only, its serializers beside its viewset). portal/urls.py routes the viewset listed here.
"""

from audit.api.events import AuditEventViewSet

__all__ = ["AuditEventViewSet"]
