"""Reads of orders and hosts that several callers share (services write; selectors read)."""

from __future__ import annotations

from django.db.models import QuerySet

from instances.models import Instance, Order
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


def instance_load(instance_id) -> Instance:
    """One host with what its pages and its worker read (Instance.objects.with_detail())."""
    return Instance.objects.with_detail().get(pk=instance_id)
