"""portal's REST API: ``views`` (viewsets), ``serializers``, ``filters``."""

from portal.api.views import ProjectViewSet, QuotaRequestViewSet, QuotaViewSet, TokenViewSet

__all__ = ["ProjectViewSet", "QuotaRequestViewSet", "QuotaViewSet", "TokenViewSet"]
