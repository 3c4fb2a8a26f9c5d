"""The state machines: the only writers of Order.status and Instance.status (docs/design.md
rule 3)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record_system
from instances.metrics import provisioning_observed
from instances.models import (
    HostAgentCredential,
    Instance,
    InstanceEvent,
    JobRun,
    MigSlot,
    Order,
    OrderEvent,
)
from instances.selectors.hosts import instance_load
from instances.services.queue import enqueue
from instances.services.webhooks import host_moved, order_event
from portal.lib.errors import Conflict
from portal.models import User
from portal.services import notices_close

log = logging.getLogger(__name__)


def order_transition(*, order: Order, to: str, reason: str, actor: str) -> tuple[Order, bool]:
    """The only writer of Order.status after creation: locks, treats a repeat as a no-op,
    refuses illegal moves, records. Returns (order, changed)."""
    with transaction.atomic():
        row = Order.objects.select_for_update().get(pk=order.pk)
        if row.status == to:
            return row, False
        if to not in Order.ALLOWED[row.status]:
            raise IllegalTransition(
                f"This order is {row.get_status_display().lower()}; it cannot become "
                f"{Order.Status(to).label.lower()}."
            )
        old, row.status = row.status, to
        row.save(update_fields=["status"])
        OrderEvent.objects.create(
            order=row, old_status=old, new_status=to, reason=reason[:500], actor=actor
        )
        audit_change(actor, action=f"{old}->{to}", object_ref=f"order:{row.pk}", reason=reason)
        if old == Order.Status.PENDING_APPROVAL:
            # Decided, withdrawn or expired: the approvers' "Approval needed" is answered.
            notices_close(topic=order_decide_topic(row), reason=f"The order is {to}.")
        order_event(row, to)
    return row, True


def order_decide_topic(order: Order) -> str:
    """The topic of the notices asking approvers to decide ``order``."""
    return f"order:{order.pk}:decide"


def instance_topic(instance: Instance, kind: str) -> str:
    """The topic of a host's notices of one ``kind`` (idle, lease, stuck): all of them close
    when the host ends (HOST_NOTICES_CLOSE_AT), all but the lease's when it stops
    (STOP_CLOSES)."""
    return f"host:{instance.pk}:{kind}"


# A host in one of these has answered its idle, lease and stuck notices: nothing is left to
# keep running, extend or retry.
HOST_NOTICES_CLOSE_AT = frozenset(
    {
        Instance.Status.TERMINATED,
        Instance.Status.FAILED,
        Instance.Status.INTERRUPTED,
    }
)
# A stopped host has answered its idle and stuck notices, not its lease warning: the lease still
# ends a stopped host, its disk with it (leases_expire), so that notice stays open until the
# host ends or the lease is extended.
STOP_CLOSES = ("idle", "stuck")


def order_decided(*, order: Order, to: str, user: User, reason: str, said: str) -> Order:
    """Take an order out of waiting for approval (approved, rejected or withdrawn) and record
    who decided, when and why (``reason``, as they wrote it; ``said`` goes on the event)."""
    order, _ = order_transition(order=order, to=to, reason=said, actor=actor_of(user))
    Order.objects.filter(pk=order.pk).update(
        decided_by=user, decided_at=timezone.now(), decision_reason=reason[:500]
    )
    return order


# --- the instance state machine --------------------------------------------------------------


ENDED = frozenset({Instance.Status.TERMINATED, Instance.Status.FAILED})
# A shared MIG host that moves here takes its slices with it (services/mig.py HOST_LEAVING).
LEFT = ENDED | {Instance.Status.INTERRUPTED, Instance.Status.STOPPING, Instance.Status.STOPPED}


class IllegalTransition(Conflict):
    code = "invalid_state"


def actor_of(user: User | None, task: str = "") -> str:
    return f"user:{user.username}" if user is not None else f"system:{task or 'portal'}"


def instance_transition(
    *,
    instance: Instance | uuid.UUID | str,
    to: str,
    reason: str,
    actor: str,
    at: datetime | None = None,
) -> tuple[Instance, bool]:
    """The only writer of Instance.status (docs/design.md rule 3). Locks the row, treats a repeat
    as a no-op, refuses illegal moves, and records the move with the cloud's time when given."""
    pk = instance.pk if isinstance(instance, Instance) else instance
    with transaction.atomic():
        row = Instance.objects.select_for_update().select_related("order").get(pk=pk)
        if row.status == to:
            return row, False
        if to not in Instance.ALLOWED[row.status]:
            raise IllegalTransition(
                f"A host that is {row.get_status_display().lower()} cannot become "
                f"{Instance.Status(to).label.lower()}.",
            )
        at = at or timezone.now()
        # Never record a move earlier than the one before it: clocks of clouds and workers differ.
        at = max(at, row.status_changed_at)
        old = row.status
        row.status = to
        row.status_reason = reason[:500]
        row.status_changed_at = at
        fields = ["status", "status_reason", "status_changed_at"]
        if to == Instance.Status.RUNNING and row.lease_started_at is None:
            row.lease_started_at = at
            row.lease_expires_at = row.lease_end()
            fields += ["lease_started_at", "lease_expires_at"]
        row.save(update_fields=fields)
        InstanceEvent.objects.create(
            instance=row, old_status=old, new_status=to, reason=reason[:500], at=at, actor=actor
        )
        if to in ENDED:
            # The host's telemetry agent loses its credential with the host.
            HostAgentCredential.objects.filter(instance=row, revoked_at__isnull=True).update(
                revoked_at=at
            )
            # Nor can its job agent report a run's exit: a run still open on it ends with it.
            JobRun.objects.end_with_host(row, at)
            # An ended slice gives its MIG slot back (a slice is never held by two).
            MigSlot.objects.release(row, at)
        audit_change(actor, action=f"{old}->{to}", object_ref=f"instance:{row.pk}", reason=reason)
        if to in HOST_NOTICES_CLOSE_AT:
            notices_close(
                topic=f"host:{row.pk}:",
                prefix=True,
                reason=f"The host is {Instance.Status(to).label.lower()}.",
            )
        elif to == Instance.Status.STOPPED:
            for kind in STOP_CLOSES:
                notices_close(topic=instance_topic(row, kind), reason="The host is stopped.")
        if to == Instance.Status.RUNNING and old in (
            Instance.Status.REQUESTED,
            Instance.Status.PROVISIONING,
        ):
            provisioning_observed(row)
        host_moved(row, to)
        if row.order.mig_host and (to == Instance.Status.RUNNING or to in LEFT):
            # Its slices run when it runs and end when it ends.
            enqueue("instances.tasks.follow_mig_host", str(row.pk))
    return row, True


def audit_change(actor: str, *, action: str, object_ref: str, reason: str) -> None:
    """Changes made by tasks leave an audit row too (a user's are covered by their request's)."""
    if actor.startswith("system:"):
        audit_record_system(
            name=actor.removeprefix("system:"),
            action=action,
            object_ref=object_ref,
            summary={"reason": reason[:300]},
        )


def instance_walk(instance: Instance, path: list[str], *, reason: str, actor: str, at: datetime):
    """Apply several moves at the cloud's time (e.g. running → stopping → stopped when a host was
    stopped behind the portal's back), skipping the ones already made. If another process moved
    the row meanwhile, stop where it is: the next look at the cloud continues from there."""
    for status in path:
        if instance.status == status:
            continue
        if status not in Instance.ALLOWED[instance.status]:
            continue
        try:
            instance, _ = instance_transition(
                instance=instance, to=status, reason=reason, actor=actor, at=at
            )
        except IllegalTransition:
            return instance_load(instance.pk)
    return instance


def instance_note(*, instance: Instance, note: str, actor: str) -> None:
    """Record an action that changed no status (an adoption, a re-enqueue) on the timeline."""
    InstanceEvent.objects.create(
        instance=instance,
        old_status=instance.status,
        new_status=instance.status,
        reason=note[:500],
        at=timezone.now(),
        actor=actor,
    )
    audit_change(actor, action="note", object_ref=f"instance:{instance.pk}", reason=note)
