"""billing/api/: the REST API for costs and budgets, one module per topic, its serializers
beside its viewset: reports (``/api/v1/costs/``) and budgets (``/api/v1/budgets/``); filters
documents the cost report's query parameters. portal/urls.py routes the viewsets listed here.
"""

from billing.api.budgets import BudgetViewSet
from billing.api.reports import CostViewSet, streamed_csv

__all__ = ["BudgetViewSet", "CostViewSet", "streamed_csv"]
