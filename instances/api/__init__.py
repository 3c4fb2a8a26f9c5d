"""The instances API: serializers, views (viewsets) and filters; portal/urls.py routes them."""

from instances.api.pools import PoolViewSet
from instances.api.views import ImageViewSet, InstanceTypeViewSet, InstanceViewSet, OrderViewSet

__all__ = ["ImageViewSet", "InstanceTypeViewSet", "InstanceViewSet", "OrderViewSet", "PoolViewSet"]
