"""instances/api/: the instances API, one module per topic (catalog, orders, hosts, pools,
telemetry, quotas, approvals, idle, jobs), each with that topic's serializers, filters and viewsets;
fields.py holds what they share. portal/urls.py routes the viewsets listed here."""

from instances.api.catalog import ImageViewSet, InstanceTypeViewSet, MigProfileViewSet
from instances.api.hosts import InstanceViewSet
from instances.api.jobs import JobViewSet
from instances.api.orders import OrderViewSet
from instances.api.pools import PoolViewSet
from instances.api.quotas import ProjectViewSet, QuotaRequestViewSet, QuotaViewSet

__all__ = [
    "ImageViewSet",
    "InstanceTypeViewSet",
    "InstanceViewSet",
    "JobViewSet",
    "MigProfileViewSet",
    "OrderViewSet",
    "PoolViewSet",
    "ProjectViewSet",
    "QuotaRequestViewSet",
    "QuotaViewSet",
]
