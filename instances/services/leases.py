"""Leases: hosts whose lease ran out are stopped or terminated."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from instances.models import (
    ACTIONS,
    Instance,
)
from instances.services.queue import enqueue
from instances.services.transitions import IllegalTransition, instance_transition

log = logging.getLogger(__name__)


def leases_expire(*, now: datetime | None = None) -> list[str]:
    """Terminate hosts whose lease has ended; return their ids."""
    now = now or timezone.now()
    ended = Instance.objects.filter(
        lease_expires_at__lte=now,
        status__in=[Instance.Status.RUNNING, Instance.Status.STOPPED, Instance.Status.STARTING],
    ).select_related("order")
    expired = []
    for instance in ended:
        try:
            row, moved = instance_transition(
                instance=instance,
                to=Instance.Status.TERMINATING,
                reason=f"the {instance.order.lease_hours} h lease ended",
                actor="system:lease",
            )
        except IllegalTransition:
            continue  # it moved on meanwhile (a user terminated it, the cloud lost it)
        if moved:
            enqueue(ACTIONS["terminate"].task, str(row.pk))
            expired.append(str(row.pk))
    return expired


def instance_system_stop(*, instance: Instance, reason: str, actor: str) -> Instance:
    """Stop a running host on the portal's own account (a budget's stop-hosts policy).

    On-demand hosts stop (their owner may start them again); spot hosts terminate, since the
    cloud cannot stop a one-time spot host. A host that is no longer running is left alone.
    The cloud call is enqueued once the transaction commits.
    """
    with transaction.atomic():
        row = Instance.objects.select_for_update().get(pk=instance.pk)
        if row.status != Instance.Status.RUNNING:
            return row
        step = ACTIONS["stop"] if ACTIONS["stop"].allows(row) else ACTIONS["terminate"]
        row, moved = instance_transition(instance=row, to=step.to, reason=reason, actor=actor)
        if moved:
            enqueue(step.task, str(row.pk))
    return row
