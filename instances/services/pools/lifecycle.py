"""instances/services/pools/lifecycle.py: a pool's life. Create (through the project's approval
policy, as an order of max hosts), resize, delete, and what deciding a pool's order or a budget
stop does to it.

The autoscaler pass that launches and ends a pool's hosts is autoscaler.py beside this module
(checks.py holds the sizes and the launch order, schedules.py the scheduled actions). A pool's
hosts hang on its launch order (type, image, key, lease, checkpoint location), so every other
loop (billing, reconcile, leases, spot recovery) treats them as hosts like any other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from instances.models import (
    Image,
    Instance,
    InstanceType,
    InterruptionPolicy,
    Order,
    Pool,
    PoolEvent,
)
from instances.services.hosts import instances_end
from instances.services.pools.checks import (
    SIZE_FIELDS,
    TUNING,
    check_fallbacks,
    check_sizes,
    pool_order_place,
    pool_order_request,
    refuse,
    refuse_unknown,
)
from instances.services.transitions import (
    actor_of,
    instance_transition,
    order_decided,
)
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User
from portal.services import notice_send

K = PoolEvent.Kind


def pool_event(
    pool: Pool,
    kind: str,
    message: str,
    *,
    actor: str,
    old: int | None = None,
    new: int | None = None,
    at: datetime | None = None,
    save: bool = True,
) -> PoolEvent:
    """A line of the pool's activity; ``save=False`` leaves it for the caller to write with
    others (the autoscaler writes a pass's events in one INSERT)."""
    event = PoolEvent(
        pool=pool,
        kind=kind,
        message=message[:500],
        old_desired=old,
        new_desired=new,
        actor=actor,
        at=at or timezone.now(),
    )
    if save:
        event.save(force_insert=True)
    return event


# --- create, change, delete ------------------------------------------------------------------


def pool_create(
    *,
    user: User,
    project: Project,
    name: str,
    instance_type: InstanceType,
    image: Image,
    ssh_public_key: str,
    max_size: int,
    min_size: int = 0,
    desired: int | None = None,
    fallback_instance_types: list | None = None,
    on_demand_base: int = 0,
    spot_percent: int = 0,
    interruption_policy: str = InterruptionPolicy.RELAUNCH_SPOT,
    target_gpu_utilization: int | None = None,
    **tuning: int,
) -> Pool:
    """Create a pool: active at once, or waiting for approval when the project's approval
    policy would hold an order of ``max_size`` such hosts. Its hosts launch on the next
    autoscaler pass."""
    if not permissions.can_create_pool(user, project):
        raise Forbidden(f"You cannot create pools in {project.slug}; ask to join it.")
    desired = min_size if desired is None else desired
    name = (name or "").strip()
    values = {
        "min_size": min_size,
        "desired": desired,
        "max_size": max_size,
        "on_demand_base": on_demand_base,
        "spot_percent": spot_percent,
        "target_gpu_utilization": target_gpu_utilization,
        **tuning,
    }
    errors: dict = {}
    if not name or len(name) > 64 or "\x00" in name:
        refuse(errors, "name", "name must be 1 to 64 characters.", "invalid")
    check_sizes(errors, values)
    if interruption_policy not in InterruptionPolicy.values:
        refuse(
            errors,
            "interruption_policy",
            "interruption_policy accepts notify, relaunch_spot or fallback_on_demand.",
            "invalid_choice",
        )
    fallbacks = check_fallbacks(errors, instance_type, image, fallback_instance_types or [])
    if errors:
        raise ValidationError(errors)
    request = pool_order_request(
        user=user,
        project=project,
        fields={
            **values,
            "instance_type": instance_type,
            "image": image,
            "ssh_public_key": ssh_public_key,
            "interruption_policy": interruption_policy,
        },
    )
    try:
        with transaction.atomic():
            pool = Pool.objects.create(
                project=project,
                name=name,
                created_by=user,
                instance_type=instance_type,
                fallback_instance_types=fallbacks,
                image=image,
                ssh_public_key=request.ssh_public_key,
                ssh_key_fingerprint=request.ssh_key_fingerprint,
                interruption_policy=interruption_policy,
                status=Pool.Status.ACTIVE,
                **values,
            )
            order, approval = pool_order_place(
                pool,
                request,
                user=user,
                spot_percent=spot_percent,
                on_demand_base=on_demand_base,
                interruption_policy=interruption_policy,
            )
            pool.launch_order = order
            pool.approved_max = 0 if approval else max_size
            if approval:
                pool.status = Pool.Status.AWAITING_APPROVAL
                pool.status_reason = approval
            pool.save(update_fields=["launch_order", "approved_max", "status", "status_reason"])
            pool_event(
                pool,
                K.CREATED,
                f"created by {user.username}: {min_size}..{max_size} hosts, desired {desired}"
                + (f"; waits for approval ({approval})" if approval else ""),
                actor=actor_of(user),
                new=desired,
            )
    except IntegrityError:
        raise Conflict(
            f"{project.slug} already has a pool named {name}; pick another name.",
            code="name_taken",
            field="name",
        ) from None
    return pool


def lock_for_change(pool: Pool, user: User | None) -> Pool:
    if user is not None and not permissions.can_change_pool(user, pool):
        raise Forbidden("Only the pool's creator, a manager of the project or an admin changes it.")
    row = Pool.objects.select_for_update(of=("self",)).select_related("project").get(pk=pool.pk)
    if row.status not in (Pool.Status.ACTIVE, Pool.Status.AWAITING_APPROVAL):
        raise Conflict(
            f"This pool is {row.get_status_display().lower()}; it cannot be changed.",
            code="pool_ended",
        )
    return row


def pool_update(*, pool: Pool, user: User, **changes) -> Pool:
    """Change sizes, the mix, the policy or the target. Raising max_size above what was
    approved asks the approval policy again (an order of the new max); until it is decided
    the pool keeps its old max."""
    allowed = {
        *SIZE_FIELDS,
        "on_demand_base",
        "spot_percent",
        "interruption_policy",
        "target_gpu_utilization",
        *TUNING,
    }
    refuse_unknown(changes, allowed)
    with transaction.atomic():
        row = lock_for_change(pool, user)
        values = {
            name: getattr(row, name)
            for name in (*SIZE_FIELDS, "on_demand_base", "spot_percent", "target_gpu_utilization")
        }
        values.update({name: getattr(row, name) for name in TUNING})
        values.update(changes)
        if "max_size" in changes and "desired" not in changes:
            values["desired"] = min(values["desired"], values["max_size"])
        if "min_size" in changes and "desired" not in changes:
            values["desired"] = max(values["desired"], values["min_size"])
        errors: dict = {}
        check_sizes(errors, values)
        policy = changes.get("interruption_policy", row.interruption_policy)
        if policy not in InterruptionPolicy.values:
            refuse(
                errors,
                "interruption_policy",
                "interruption_policy accepts notify, relaunch_spot or fallback_on_demand.",
                "invalid_choice",
            )
        if values["spot_percent"] and not row.instance_type.spot_offered:
            refuse(
                errors,
                "spot_percent",
                f"Spot is not offered for {row.instance_type.name}; keep spot_percent at 0.",
                "spot_not_offered",
            )
        elif changes.get("spot_percent") and row.project.tenancy == row.project.Tenancy.HOST:
            refuse(
                errors,
                "spot_percent",
                f"{row.project.slug}'s hosts run on the dedicated host {row.project.host_id}, "
                "which takes no spot hosts; keep spot_percent at 0.",
                "spot_not_on_dedicated_host",
            )
        if errors:
            raise ValidationError(errors)
        said = []
        new_max = values["max_size"]
        waiting = (
            Order.objects.filter(pool=row, status=Order.Status.PENDING_APPROVAL).first()
            if changes.get("max_size", row.max_size) != row.max_size
            and row.status == Pool.Status.ACTIVE
            else None
        )
        # Until an approver decides, the pool keeps its max (and sizes within it).
        held = False
        if waiting is not None and waiting.count == new_max:
            held = True  # asked again while it waits: the one held order stands
        elif new_max > row.approved_max and row.status == Pool.Status.ACTIVE:
            if waiting is not None:
                said += held_orders_cancel(row, user, f"superseded by max {new_max}")
            request = pool_order_request(
                user=user,
                project=row.project,
                fields={
                    **values,
                    "instance_type": row.instance_type,
                    "image": row.image,
                    "ssh_public_key": row.ssh_public_key,
                    "interruption_policy": policy,
                },
            )
            _, approval = pool_order_place(
                row,
                request,
                user=user,
                spot_percent=values["spot_percent"],
                on_demand_base=values["on_demand_base"],
                interruption_policy=policy,
            )
            if approval:
                said.append(f"max {new_max} waits for approval ({approval})")
                held = True
            else:
                row.approved_max = new_max
        elif waiting is not None:
            # Lowered to what was approved: the raise that waits is no longer wanted.
            said += held_orders_cancel(row, user, f"withdrawn: max set to {new_max}")
        elif row.status == Pool.Status.AWAITING_APPROVAL and new_max > row.max_size:
            # Still waiting for its first approval: the held order is for the max asked then.
            raise Conflict(
                f"This pool waits for approval of {row.max_size} hosts at most; raise max_size "
                "once it is approved.",
                code="awaiting_approval",
            )
        if held:
            values["max_size"] = row.max_size
            values["desired"] = min(values["desired"], row.max_size)
            values["min_size"] = min(values["min_size"], row.max_size)
        old_desired = row.desired
        for name, value in values.items():
            if getattr(row, name) != value:
                said.append(f"{name} {getattr(row, name)} → {value}")
                setattr(row, name, value)
        row.interruption_policy = policy
        # A person's change ends the backoff of a refused scale-out: try at once.
        row.blocked_until, row.blocked_markets = None, []
        row.save()
        if said:
            pool_event(
                row,
                K.CHANGED,
                f"{user.username}: " + "; ".join(said),
                actor=actor_of(user),
                old=old_desired,
                new=row.desired,
            )
    return row


def pool_set_desired(*, pool: Pool, user: User, desired: int) -> Pool:
    """Scale by hand: desired within min..max (the next pass converges)."""
    return pool_update(pool=pool, user=user, desired=desired)


def pool_delete(*, pool: Pool, user: User) -> Pool:
    """End the pool: its hosts are terminated, a held order cancelled; the pool is deleted
    once its last host has ended (the autoscaler pass finishes it)."""
    with transaction.atomic():
        row = lock_for_change(pool, user)
        held_orders_cancel(row, user, f"pool {row.name} deleted")
        old = row.desired
        row.status = Pool.Status.DELETING
        row.status_reason = f"deleted by {user.username}"
        row.min_size = row.desired = 0
        row.save()
        pool_event(
            row, K.DELETED, f"deleted by {user.username}", actor=actor_of(user), old=old, new=0
        )
        instances_end(
            Instance.objects.filter(pool=row, status__in=Instance.LIVE),
            reason=f"pool {row.name} deleted by {user.username}",
            actor=actor_of(user),
        )
    return row


def held_orders_cancel(pool: Pool, user: User, reason: str) -> list[str]:
    """Cancel the pool's order that waits for approval (a first order or a raise of max):
    it leaves the approvers' queue, decided by ``user`` for ``reason``. Says what it did."""
    said = []
    for order in Order.objects.filter(pool=pool, status=Order.Status.PENDING_APPROVAL):
        order_decided(
            order=order,
            to=Order.Status.CANCELLED,
            user=user,
            reason=reason,
            said=f"{reason} by {user.username}",
        )
        said.append(f"the raise to {order.count} waiting for approval is cancelled ({reason})")
        if user.pk != order.requester_id:
            notice_send(
                user=order.requester,
                subject=f"Pool {pool.name}: your request for {order.count} hosts was withdrawn",
                body=f"{user.username} withdrew it ({reason}) while it waited for approval; "
                "nothing was launched for it.",
                link=f"/pools/{pool.pk}/",
            )
    return said


# --- what deciding its order, a budget, does to a pool -------------------------------------


def pool_order_decided(*, order: Order, approved: bool, actor: str, reason: str = "") -> None:
    """Called by the approvals when a pool's held order is decided (approved, rejected,
    cancelled or expired): the pool becomes active, or gets the max it asked for; or it is
    rejected (a first order) or keeps its old max (a raise)."""
    pool = Pool.objects.select_for_update(of=("self",)).get(pk=order.pool_id)
    first = pool.status == Pool.Status.AWAITING_APPROVAL
    if approved:
        pool.approved_max = max(pool.approved_max, order.count)
        if first:
            pool.status, pool.status_reason = Pool.Status.ACTIVE, ""
        else:
            pool.max_size = max(pool.max_size, order.count)
        pool.save()
        pool_event(
            pool,
            K.APPROVED,
            f"approved ({actor.removeprefix('user:')}): up to {order.count} hosts"
            + (f"; {reason}" if reason else ""),
            actor=actor,
        )
        return
    if first:
        pool.status = Pool.Status.REJECTED
        pool.status_reason = reason[:500]
        pool.save()
    pool_event(
        pool,
        K.REJECTED,
        f"{order.get_status_display().lower()}: {order.count} hosts"
        + (f" ({reason})" if reason else "")
        + ("" if first else f"; max stays {pool.max_size}"),
        actor=actor,
    )


def pools_budget_stop(*, project: Project, reason: str) -> list[Pool]:
    """A budget's "stop running hosts" policy: the project's pools go to zero and say why;
    the autoscaler ends their hosts (the budget stop may stop them first)."""
    stopped = []
    with transaction.atomic():
        pools = Pool.objects.select_for_update(of=("self",)).filter(
            project=project, status=Pool.Status.ACTIVE
        )
        for pool in pools:
            if pool.desired == 0 and pool.min_size == 0:
                continue
            old = pool.desired
            pool.min_size = pool.desired = 0
            pool.save(update_fields=["min_size", "desired", "updated_at"])
            pool_event(pool, K.BUDGET, f"set to 0: {reason}", actor="system:budget", old=old, new=0)
            stopped.append(pool)
    for pool in stopped:
        notice_send(
            user=pool.created_by,
            subject=f"Pool {pool.name} in {project.slug} set to 0 hosts",
            body=f"{reason[:300]}. Set desired again once the budget allows.",
            link=f"/pools/{pool.pk}/",
        )
    return stopped


def pools_retry_now(*, project: Project) -> int:
    """Called by limits_moved: a project's quota or budget just changed, so its pools held
    by a refused scale-out try again at the next pass instead of at the end of their backoff.
    The refusal streak stays: a pool still held says nothing new and sends no second notice."""
    return Pool.objects.filter(
        project=project, status=Pool.Status.ACTIVE, blocked_until__isnull=False
    ).update(blocked_until=None, blocked_markets=[])


def pool_capacity_refused(*, instance: Instance) -> bool:
    """The cloud had no capacity for a pool host's market and type: the host ends (failed),
    and the pool leaves that market and type alone for PORTAL_POOL_CAPACITY_HOLD_SECONDS, so
    its next pass tries a fallback type, or on-demand when its mix allows. True: the launch
    stops retrying."""
    if instance.status not in (Instance.Status.REQUESTED, Instance.Status.PROVISIONING):
        return False
    now = timezone.now()
    until = now + timedelta(seconds=settings.PORTAL_POOL_CAPACITY_HOLD_SECONDS)
    key = f"{instance.market}:{instance.instance_type.name}"
    market = instance.market.replace("_", "-")
    with transaction.atomic():
        instance_transition(
            instance=instance,
            to=Instance.Status.FAILED,
            reason=f"The cloud has no {market} capacity for {instance.instance_type.name}; "
            "the pool tries another way.",
            actor="system:autoscaler",
        )
        pool = Pool.objects.select_for_update(of=("self",)).get(pk=instance.pool_id)
        held = dict(pool.capacity_holds)
        first = key not in held or datetime.fromisoformat(held[key]) <= now
        held[key] = until.isoformat()
        pool.capacity_holds = held
        pool.save(update_fields=["capacity_holds", "updated_at"])
        if first:
            pool_event(
                pool,
                K.CAPACITY,
                f"no {market} capacity for {instance.instance_type.name}; not tried again "
                f"before {until:%H:%M} UTC",
                actor="system:autoscaler",
            )
    return True
