"""portal's REST API, one module per topic (people: projects and members; tokens; webhooks),
each with that topic's serializers, filters and viewsets. portal/urls.py routes the viewsets
listed here."""

from portal.api.people import ProjectViewSet
from portal.api.tokens import TokenViewSet
from portal.api.webhooks import WebhookViewSet

__all__ = ["ProjectViewSet", "TokenViewSet", "WebhookViewSet"]
