"""portal's REST API: ``views`` (viewsets), ``serializers``, ``filters``."""

from portal.api.views import ProjectViewSet, TokenViewSet

__all__ = ["ProjectViewSet", "TokenViewSet"]
