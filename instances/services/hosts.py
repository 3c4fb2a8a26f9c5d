"""instances/services/hosts.py: a host's record made (an order's hosts, a replacement, a shared
MIG host), its launch sent on commit; what users ask of a host: stop, start, terminate (the
cloud call is a task); and hosts the portal ends on its own account (a pool scaling in, a job
that ended)."""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from instances.lib.checkpoints import checkpoint_uri_for
from instances.models import (
    ACTIONS,
    TASK_OF_STATUS,
    Instance,
    InstanceEvent,
    Order,
)
from instances.services.queue import enqueue
from instances.services.transitions import IllegalTransition, actor_of, instance_transition
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import User

log = logging.getLogger(__name__)


def instance_request_action(
    *, instance: Instance, user: User, action: str, managed: set[int] | None = None
) -> Instance:
    """Ask for a stop, start or terminate (Instance's ACTIONS table says from which statuses,
    to which status and by which task); the cloud call is a task sent once this commits. A
    repeat of a request already made is a no-op. ``managed``: the user's managed projects, when
    the caller asks many hosts (read once, not once per host)."""
    step = ACTIONS[action]
    # Who may act is answered before what the host allows: someone who may not touch the host
    # hears 403, never a 409 that describes a host that is not theirs to change.
    if not permissions.can_act_on_host(user, instance, managed):
        raise Forbidden(f"You can see this host but not {action} it; ask its owner.")
    refusal = step.refusal(instance)
    if refusal is not None:
        raise Conflict(refusal[0], code=refusal[1])
    with transaction.atomic():
        row = Instance.objects.select_for_update().get(pk=instance.pk)
        if row.status == step.to:
            return row
        if row.status not in step.allowed_from:
            allowed = ", ".join(sorted(Instance.Status(s).label.lower() for s in step.allowed_from))
            raise IllegalTransition(
                f"This host is {row.get_status_display().lower()}; only {allowed} hosts can be "
                f"{step.done}."
            )
        row, _ = instance_transition(
            instance=row,
            to=step.to,
            reason=f"{action} requested by {user.username}",
            actor=actor_of(user),
        )
        enqueue(step.task, str(row.pk))
    return row


def instance_request_stop(*, instance: Instance, user: User) -> Instance:
    return instance_request_action(instance=instance, user=user, action="stop")


def instance_request_start(*, instance: Instance, user: User) -> Instance:
    return instance_request_action(instance=instance, user=user, action="start")


def instance_request_terminate(*, instance: Instance, user: User) -> Instance:
    return instance_request_action(instance=instance, user=user, action="terminate")


def instances_request_action(
    *, instances: list[Instance], user: User, action: str
) -> tuple[list[Instance], list[tuple[Instance, Conflict]]]:
    """Ask one action of many hosts at once (My hosts' bulk stop and terminate): one request
    per host, each in its own transaction, as if asked one by one.

    Who may act is answered first and for all of them: one host that is not the user's to
    change refuses the whole batch (403), so nothing half happens for a reason the user cannot
    fix. A host whose state refuses (already terminated, a spot host asked to stop) is reported
    with its sentence and the others go ahead. Returns (hosts asked, [(host, the refusal)])."""
    if action not in ACTIONS:
        raise Conflict(f"{action!r} is not something a host can be asked.", code="bad_action")
    managed = permissions.managed_project_ids(user)
    refused = [host for host in instances if not permissions.can_act_on_host(user, host, managed)]
    if refused:
        raise Forbidden(
            f"You can see {len(refused)} of these hosts but not {action} them; ask their owner."
        )
    done, failed = [], []
    for host in instances:
        try:
            done.append(
                instance_request_action(instance=host, user=user, action=action, managed=managed)
            )
        except Conflict as error:  # IllegalTransition is one too
            failed.append((host, error))
    return done, failed


def instances_end(hosts, *, reason: str, actor: str) -> list[str]:
    """Terminate these hosts on the portal's own account (a pool scaling in, a job that ended):
    a transition each, the cloud call a task on commit; hosts already leaving are skipped."""
    ended = []
    for host in hosts:
        if host.status in (Instance.Status.TERMINATING, Instance.Status.INTERRUPTED):
            continue
        try:
            row, changed = instance_transition(
                instance=host, to=Instance.Status.TERMINATING, reason=reason, actor=actor
            )
        except IllegalTransition:
            continue  # ended meanwhile
        if changed:
            enqueue("instances.tasks.terminate_instance", str(row.pk))
            ended.append(str(row.pk))
    return ended


def order_instances_create(order: Order) -> list[Instance]:
    if not order.checkpoint_uri:
        # Fixed once, when the order's first hosts are created; replacements inherit it.
        order.checkpoint_uri = checkpoint_uri_for(
            project_slug=order.project.slug, order_id=order.pk
        )
        Order.objects.filter(pk=order.pk).update(checkpoint_uri=order.checkpoint_uri)
    reason = f"ordered by {order.requester.username}"
    if order.is_cluster:
        reason = f"{reason}, as one cluster of {order.count} nodes"
    return [
        instance_create(
            order,
            market=order.market,
            reason=reason,
            rank=rank if order.is_cluster else None,
        )
        for rank in range(order.count)
    ]


def instance_create(
    order: Order,
    *,
    market: str,
    reason: str,
    replaces: Instance | None = None,
    rank: int | None = None,
    actor: str = "",
) -> Instance:
    """One host of an order in `requested`, its first event, and its launch sent on commit
    (``actor``: who asked, when not the order's requester or spot recovery)."""
    now = timezone.now()
    instance_id = uuid.uuid4()
    instance = Instance.objects.create(
        id=instance_id,
        order=order,
        project=order.project,
        owner=order.requester,
        instance_type=order.instance_type,
        image=order.image,
        market=market,
        region=order.region,
        # EC2 tokens are at most 64 ASCII characters; this one is fixed before any call.
        client_token=f"portal-{instance_id.hex}",
        status_changed_at=now,
        replaces=replaces,
        rank=replaces.rank if replaces is not None else rank,
        # A replacement carries on the lease of the host it replaces: its start and extensions,
        # so that its end is the same and a later extension counts from the same start.
        lease_started_at=replaces.lease_started_at if replaces is not None else None,
        lease_extended_hours=replaces.lease_extended_hours if replaces is not None else 0,
        lease_expires_at=replaces.lease_end() if replaces is not None else None,
    )
    InstanceEvent.objects.create(
        instance=instance,
        old_status="",
        new_status=Instance.Status.REQUESTED,
        reason=reason,
        at=now,
        actor=actor or (actor_of(order.requester) if replaces is None else "system:spot_recovery"),
    )
    enqueue(TASK_OF_STATUS[Instance.Status.REQUESTED], str(instance_id))
    return instance
