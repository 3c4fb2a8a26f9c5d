"""instances/selectors/orders.py: reads of orders that several callers share: the held orders a
person may decide (the approval inbox, the Approvals badge) and those waiting that they may see
(My hosts)."""

from __future__ import annotations

from django.db.models import QuerySet

from instances.models import Order
from portal import permissions


def orders_to_decide(user) -> QuerySet:
    """Held orders this person may decide: every project's for admins, their projects' for
    managers, never their own."""
    if not permissions.can_order(user):
        return Order.objects.none()
    return (
        Order.objects.filter(status=Order.Status.PENDING_APPROVAL)
        .filter(permissions.decidable_projects_q(user))
        .exclude(requester=user)
    )


def orders_to_decide_count(user) -> int:
    """The number on the Approvals link (instances/templatetags/instances_tags.py)."""
    return orders_to_decide(user).count()


def held_orders(user, *, mine: bool = True) -> list[dict]:
    """Orders waiting for approval that this person may see (``mine``: that they placed), the
    oldest first, each with who may decide it and whether this person may cancel it. One query
    for the orders and one per project for its deciders."""
    rows = (
        Order.objects.for_user(user)
        .filter(status=Order.Status.PENDING_APPROVAL)
        .select_related("project", "instance_type", "requester", "pool", "mig_profile")
        .order_by("created_at")
        .distinct()
    )
    if mine:
        rows = rows.filter(requester=user)
    deciders: dict[int, list[str]] = {}
    managed = permissions.managed_project_ids(user)
    held = []
    for order in rows[:100]:
        if order.project_id not in deciders:
            deciders[order.project_id] = sorted(
                permissions.approvers_of(order.project).values_list("username", flat=True)
            )
        held.append(
            {
                "o": order,
                "deciders": [
                    name for name in deciders[order.project_id] if name != order.requester.username
                ],
                "can_cancel": permissions.can_cancel_order(user, order, managed),
            }
        )
    return held
