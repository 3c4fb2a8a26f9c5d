"""REST API for costs and budgets: ``/api/v1/costs/`` and ``/api/v1/budgets/``.

serializers.py documents the bodies (and builds them), filters.py the cost report's query
parameters, views.py holds the viewsets that portal/urls.py registers on the router.
"""

from billing.api.views import BudgetViewSet, CostViewSet, streamed_csv

__all__ = ["BudgetViewSet", "CostViewSet", "streamed_csv"]
