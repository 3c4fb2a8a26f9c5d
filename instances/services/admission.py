"""Admission: whether an order (or a lease extension, or a pool's launch) may be admitted.

The checks are the registry's order_admission_checks (audit/registry.py: quota, then budget),
each raising a Conflict to refuse. order_admit runs them under the project's row lock, so
concurrent orders of one project are admitted one at a time; first_refusal asks them without the
lock, for a preview.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audit.registry import ADMISSION_CHECKS
from portal.lib.errors import Conflict
from portal.metrics import ORDERS
from portal.models import Project

if TYPE_CHECKING:
    from instances.services.orders import OrderRequest


# Admission refusals by their error code, for the orders-by-outcome metric.
REFUSALS = {"quota_exceeded": "refused_quota", "budget_exceeded": "refused_budget"}


def order_admit(request: OrderRequest) -> None:
    """Run every admission check while holding the project's row lock (until commit)."""
    refusal = admission_refusal(request)
    if refusal is not None:
        # Counted at once: the refusal rolls the transaction back.
        ORDERS.labels(REFUSALS.get(refusal.code, "refused_other")).inc()
        raise refusal


def admission_refusal(request: OrderRequest) -> Conflict | None:
    """The first admission check that refuses ``request``, or None; takes the project's row
    lock, held until the caller's transaction ends. A pool asks it to find how many of its
    missing hosts fit."""
    Project.objects.select_for_update().get(pk=request.project.pk)
    return first_refusal(request)


def first_refusal(request: OrderRequest) -> Conflict | None:
    """The refusal of the first admission check (quota, then budget: the order of
    audit/registry.py's order_admission_checks) that refuses ``request``, or None. Takes no
    lock: the order page's preview asks it too, and the submit asks again under the lock."""
    for check in ADMISSION_CHECKS:
        try:
            check(request)
        except Conflict as refusal:
            return refusal
    return None
