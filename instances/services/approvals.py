"""Deciding held orders: approve (the admission checks run again), reject, cancel, expire; and
the project's approval policy that decides which orders are held."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.models import (
    ApprovalPolicy,
    Job,
    Order,
    Pool,
    Quota,
)
from instances.services.admission import order_admit
from instances.services.hosts import order_instances_create
from instances.services.orders import order_request_of
from instances.services.pools.lifecycle import pool_order_decided
from instances.services.quotas import _refuse, _whole, quota_catalog_problems
from instances.services.transitions import (
    IllegalTransition,
    actor_of,
    order_decided,
    order_transition,
)
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User
from portal.services import notice_send

log = logging.getLogger(__name__)


def _lock_pool_first(order: Order) -> None:
    """A pool's held order is locked after its pool, as pool changes lock them (pool_update,
    pool_delete): taken the other way round, a decision and a change of the pool deadlock."""
    if order.pool_id:
        list(Pool.objects.select_for_update().filter(pk=order.pool_id).values_list("pk"))


def _lock_undecided(order: Order) -> Order:
    """Lock a waiting order; a second click, or a second approver, gets a 409 (not a second set
    of hosts)."""
    _lock_pool_first(order)
    row = Order.objects.select_for_update().get(pk=order.pk)
    if row.status != Order.Status.PENDING_APPROVAL:
        raise Conflict(
            f"This order was already {row.get_status_display().lower()}"
            + (f" by {row.decided_by.username}" if row.decided_by_id else "")
            + "; nothing was changed.",
            code="already_decided",
        )
    return row


def order_require_decider(*, order: Order, user: User) -> None:
    """Refuse (403) anyone who may not decide this order, before anything about the order's
    state or the decision's wording is looked at: those answers are for deciders only."""
    if not permissions.can_decide(user, order):
        raise Forbidden("Only an admin or a manager of the project (not the requester) decides.")


def order_approve(*, order: Order, user: User, reason: str = "") -> Order:
    """Approve a waiting order: the checks run again under the lock, then it provisions."""
    order_require_decider(order=order, user=user)
    with transaction.atomic():
        order = _lock_undecided(order)
        if not order.pool_id:
            # A pool's hosts are admitted one launch at a time, when the pool grows.
            order_admit(order_request_of(order))
        new_pool = order.pool_id is not None and order.pool.status == Pool.Status.AWAITING_APPROVAL
        order = order_decided(
            order=order,
            to=Order.Status.APPROVED,
            user=user,
            reason=reason,
            said=reason or "approved",
        )
        if order.pool_id:
            pool_order_decided(order=order, approved=True, actor=actor_of(user), reason=reason)
        else:
            order_instances_create(order)
            # A job held with its order said "waiting for approval: ..." until a run came.
            Job.objects.filter(order=order, status=Job.Status.PENDING).update(
                status_reason=f"approved by {user.username}; {Job.WAITING_FOR_HOST}"
            )
        notice_send(
            user=order.requester,
            subject=f"Approved: {order.described} for {order.project.slug}",
            body=f"{user.username} approved your order; "
            + (
                "the pool launches its wanted hosts on its next pass, as the quota and budget "
                "allow."
                if new_pool
                else "the pool may launch that many as it scales out."
                if order.pool_id
                else "its hosts are being provisioned."
            )
            + (f" Note: {reason}" if reason else ""),
            link=order.link,
        )
    order.refresh_from_db()
    return order


def order_reject(*, order: Order, user: User, reason: str) -> Order:
    order_require_decider(order=order, user=user)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError(
            {"reason": "Say why, so the researcher can order differently."}, code="required"
        )
    with transaction.atomic():
        order = _lock_undecided(order)
        order = order_decided(
            order=order, to=Order.Status.REJECTED, user=user, reason=reason, said=reason
        )
        if order.pool_id:
            pool_order_decided(order=order, approved=False, actor=actor_of(user), reason=reason)
        notice_send(
            user=order.requester,
            subject=f"Rejected: {order.described} for {order.project.slug}",
            body=f"{user.username} rejected your order: {reason}",
            link=f"/pools/{order.pool_id}/" if order.pool_id else "/catalog/",
        )
    order.refresh_from_db()
    return order


def order_cancel(*, order: Order, user: User, reason: str = "") -> Order:
    """Withdraw an order that waits for approval: its requester, or anyone who may decide it.
    Who may is answered first (403), then whether it still waits (409: a decided order keeps
    its decision). The requester hears of it when someone else cancelled."""
    if not permissions.can_cancel_order(user, order):
        raise Forbidden("Only the requester, a manager of the project or an admin cancels it.")
    reason = (reason or "").strip()
    with transaction.atomic():
        order = _lock_undecided(order)
        said = reason or f"cancelled by {user.username}"
        order = order_decided(
            order=order, to=Order.Status.CANCELLED, user=user, reason=reason, said=said
        )
        if order.pool_id:
            pool_order_decided(order=order, approved=False, actor=actor_of(user), reason=said)
        if user.pk != order.requester_id:
            notice_send(
                user=order.requester,
                subject=f"Cancelled: {order.described} for {order.project.slug}",
                body=f"{user.username} cancelled your order while it waited for approval"
                + (f": {reason}" if reason else ".")
                + " Nothing was launched.",
                link="/catalog/",
            )
    order.refresh_from_db()
    return order


def orders_expire(*, now: datetime | None = None) -> list[str]:
    """Expire orders that waited longer than their project's policy allows."""
    now = now or timezone.now()
    expired = []
    waiting = Order.objects.filter(status=Order.Status.PENDING_APPROVAL).select_related(
        "project__approval_policy", "instance_type", "requester", "pool", "mig_profile"
    )
    for order in waiting:
        policy = getattr(order.project, "approval_policy", None)
        days = policy.expire_after_days if policy else settings.PORTAL_APPROVAL_EXPIRY_DAYS
        if order.created_at > now - timedelta(days=days):
            continue
        with transaction.atomic():
            _lock_pool_first(order)
            try:
                _, changed = order_transition(
                    order=order,
                    to=Order.Status.EXPIRED,
                    reason=f"nobody decided within {days} days",
                    actor="system:expire",
                )
            except IllegalTransition:
                continue  # decided meanwhile
            if not changed:
                continue  # another pass expired it first and told the requester
            if order.pool_id:
                pool_order_decided(
                    order=order,
                    approved=False,
                    actor="system:expire",
                    reason=f"nobody decided within {days} days",
                )
            notice_send(
                user=order.requester,
                subject=f"Expired: {order.described} for {order.project.slug}",
                body=f"Nobody approved your order within {days} days; order again if you "
                "still need it.",
                link=f"/pools/{order.pool_id}/" if order.pool_id else "/catalog/",
            )
        expired.append(str(order.pk))
    return expired


# --- the approval policy ------------------------------------------------------------------

APPROVAL_POLICY_FIELDS = (
    "gpus_above",
    "instance_types",
    "on_demand_price_above",
    "expire_after_days",
)
APPROVAL_EXPIRY_MAX_DAYS = 60


@transaction.atomic
def approval_policy_set(*, project: Project, actor: User, **values) -> ApprovalPolicy:
    """Set which orders of the project wait for a yes (the Quotas page, the project's approval
    policy page and the API all call this). Only the fields given change."""
    unknown = set(values) - set(APPROVAL_POLICY_FIELDS)
    if unknown:
        _refuse(
            {name: "Not an approval policy field." for name in sorted(unknown)}, "unknown_field"
        )
    if not permissions.can_set_approval_policy(actor, project):
        raise Forbidden("Only admins and the project's managers change its approval policy.")
    values = _approval_values_clean(values)
    policy, _ = ApprovalPolicy.objects.select_for_update().get_or_create(project=project)
    for name, value in values.items():
        setattr(policy, name, value)
    policy.updated_by = actor
    policy.full_clean()
    policy.save()
    return policy


def _approval_values_clean(values: dict) -> dict:
    """The policy's values as given, checked as quota_values_clean checks a quota's: each type
    once, at most Quota.MAX_NAMES of them, each in the catalog."""
    values = dict(values)
    problems: dict[str, str] = {}
    if "instance_types" in values:
        names = values["instance_types"]
        if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            problems["instance_types"] = 'Give a list of type names, e.g. ["p5.48xlarge"].'
        elif len(names) > Quota.MAX_NAMES:
            problems["instance_types"] = (
                f"Give at most {Quota.MAX_NAMES}; the catalog offers fewer."
            )
        else:
            values["instance_types"] = list(dict.fromkeys(names))
    days = values.get("expire_after_days", 1)
    if not _whole(days) or not 1 <= days <= APPROVAL_EXPIRY_MAX_DAYS:
        problems["expire_after_days"] = (
            f"A held order expires after 1 to {APPROVAL_EXPIRY_MAX_DAYS} days."
        )
    price = values.get("on_demand_price_above")
    if price is not None and price < 0:
        problems["on_demand_price_above"] = "Give a price per hour of 0 or more, or none."
    if problems:
        _refuse(problems, "invalid")
    if values.get("instance_types"):
        # The quota's catalog check, the one rule for which type names exist.
        _, found = quota_catalog_problems({"allowed_instance_types": values["instance_types"]})
        if found:
            _refuse({"instance_types": found["allowed_instance_types"]}, "not_in_catalog")
    return values
