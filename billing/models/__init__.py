"""Billing data: price histories, metered usage, daily rollups, budgets, bill reconciliation.

Money in usage and rollups is an integer in rate-seconds (µ$ per hour x seconds; see
billing/lib/money.py): exact under any sum, divided and rounded only when shown.

One module per topic, every model re-exported here (``from billing.models import Usage``):

- prices: ``SpotPrice`` and ``ListPrice``
- metering: ``Usage``, ``MeterMark`` and ``MeterState``
- rollups: ``DailyRollup``, ``RollupDelta`` and their ``ScopedQuerySet``
- budgets: ``Budget``, ``BudgetAlert`` and ``default_thresholds``
- cur: ``CurImport``, ``CurResult`` and ``CurResultQuerySet``
"""

from billing.models.budgets import Budget, BudgetAlert, default_thresholds
from billing.models.cur import CurImport, CurResult, CurResultQuerySet
from billing.models.metering import MeterMark, MeterState, Usage
from billing.models.prices import ListPrice, SpotPrice
from billing.models.rollups import DailyRollup, RollupDelta, ScopedQuerySet

__all__ = [
    "Budget",
    "BudgetAlert",
    "CurImport",
    "CurResult",
    "CurResultQuerySet",
    "DailyRollup",
    "ListPrice",
    "MeterMark",
    "MeterState",
    "RollupDelta",
    "ScopedQuerySet",
    "SpotPrice",
    "Usage",
    "default_thresholds",
]
