"""portal's REST API: ``views`` (viewsets), ``serializers``, ``filters``."""

from portal.api.views import ProjectViewSet, QuotaViewSet, TokenViewSet

__all__ = ["ProjectViewSet", "QuotaViewSet", "TokenViewSet"]
