"""Leases: warnings before a lease ends, extensions, and hosts whose lease ran out."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from instances.models import (
    ACTIONS,
    Instance,
    LeaseNotice,
)
from instances.selectors.quotas import longest_lease
from instances.services.admission import order_admit
from instances.services.orders import order_estimate, order_request_of
from instances.services.queue import enqueue
from instances.services.transitions import (
    IllegalTransition,
    actor_of,
    instance_note,
    instance_topic,
    instance_transition,
)
from instances.services.webhooks import host_event
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User, WebhookEvent
from portal.services import notice_send, notices_close

log = logging.getLogger(__name__)


class LeaseLimitExceeded(Conflict):
    code = "lease_limit"


def _when(moment: datetime) -> str:
    return f"{moment:%H:%M} UTC on {moment:%b} {moment.day}"


def in_words(left: timedelta) -> str:
    """A length of time as a warning says it, truncated, never rounded up: "70 seconds",
    "59 minutes", "23 h 59 min" (a warning sent 23 h 59 min ahead never says "ends in 23 h")."""
    seconds = max(0, int(left.total_seconds()))
    if seconds < 120:
        return f"{seconds} second{'' if seconds == 1 else 's'}"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} minutes"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def lease_warnings(hours: int) -> list[int]:
    """The warnings a lease of ``hours`` gets, in minutes before its end, most urgent first: each
    of PORTAL_LEASE_NOTICE_HOURS shorter than the lease (none would come at its start), and a
    lease no longer than any of them gets one at a quarter of its length (15 minutes before the
    end of a 1 h lease), so that no lease ends unannounced."""
    lease = hours * 60
    fits = sorted(h * 60 for h in settings.PORTAL_LEASE_NOTICE_HOURS if h * 60 < lease)
    return fits or [max(1, lease // 4)]


def lease_fixed(instance: Instance) -> Conflict | None:
    """Why ``instance``'s lease is never extended, whatever its status, or None: the host
    page offers Extend only where this is None."""
    if instance.is_mig_host:
        return Conflict(
            "A shared MIG host has no lease to extend: it runs while its slices do. Extend "
            "your slice's lease instead.",
            code="mig_shared_host",
        )
    if instance.pool_id is not None:
        return Conflict(
            "A pool host's lease is not extended: its pool launches a fresh host in its place "
            "before the lease ends. To keep more hosts, raise the pool's desired count.",
            code="pool_host_lease",
        )
    return None


def instance_extend_lease(*, instance: Instance, user: User, hours: int) -> Instance:
    """Add ``hours`` to a host's lease: allowed up to the longest lease (counted, as the lease
    is, from when the host first ran) its project allows, and only if the admission checks
    (the budget) admit the extra hours as they would an order of one host for that long. Both
    are decided under the project's row lock, the lock order_submit holds, so an extension and
    an order cannot both take the last of a budget."""
    if not permissions.can_act_on_host(user, instance):
        raise Forbidden("You can see this host but not extend its lease; ask its owner.")
    if isinstance(hours, bool) or not isinstance(hours, int) or hours < 1:
        raise ValidationError({"hours": "hours must be a whole number, at least 1."}, code="min")
    refusal = lease_fixed(instance)
    if refusal is not None:
        raise refusal
    with transaction.atomic():
        # The project first, then the host: the order order_admit and the expiry take them in.
        Project.objects.select_for_update().get(pk=instance.project_id)
        row = (
            Instance.objects.select_for_update(of=("self",))
            .select_related(
                "instance_type",
                "project",
                "owner",
                "order__requester",
                "order__project",
                "order__instance_type",
                "order__image",
            )
            .get(pk=instance.pk)
        )
        if row.status not in Instance.LEASED or row.lease_expires_at is None:
            raise IllegalTransition(
                f"This host is {row.get_status_display().lower()}; only a running, stopped, "
                "stopping or starting host has a lease to extend."
            )
        longest, whose = longest_lease(project=row.project, user=row.owner)
        total = row.lease_hours_total + hours
        if total > longest:
            room = longest - row.lease_hours_total
            raise LeaseLimitExceeded(
                f"Lease limit: {whose} is {longest} h from when a host first runs; this host has "
                f"{row.lease_hours_total} h, so {hours} h more would make {total} h. "
                + (
                    f"Extend by at most {room} h."
                    if room > 0
                    else "It cannot be extended further; order a new host."
                )
            )
        order_admit(
            replace(
                order_request_of(row.order),
                requester=row.owner,
                instance_type=row.instance_type,
                market=row.market,
                count=1,
                lease_hours=hours,
                estimate=order_estimate(
                    instance_type=row.instance_type,
                    market=row.market,
                    count=1,
                    lease_hours=hours,
                    # A slice's hours cost its share, as it was ordered.
                    mig_profile=row.order.mig_profile,
                    share=row.order.mig_price_share,
                ),
                extends=row,
            )
        )
        was = row.lease_expires_at
        row.lease_extended_hours += hours
        row.lease_expires_at = row.lease_end()
        row.save(update_fields=["lease_expires_at", "lease_extended_hours"])
        instance_note(
            instance=row,
            note=f"lease extended by {hours} h by {user.username}: it ends at "
            f"{_when(row.lease_expires_at)} (was {_when(was)}), {total} h from when it first ran",
            actor=actor_of(user),
        )
        notices_close(
            topic=instance_topic(row, "lease"),
            reason=f"Lease extended by {user.username} to {_when(row.lease_expires_at)}.",
        )
    return row


def leases_warn(*, now: datetime | None = None) -> list[tuple[str, int]]:
    """Warn owners of hosts whose lease ends within one of its lease_warnings(): a notice and an
    email, once per host, lease end and warning (the LeaseNotice row, written in the notice's
    transaction, is what makes a second pass, a retried task or a restarted worker send
    nothing). Only the most urgent warning due is sent. Returns (host, minutes before)."""
    now = now or timezone.now()
    # The earliest any lease is warned: its longest notice (a short lease's comes later).
    widest = max(settings.PORTAL_LEASE_NOTICE_HOURS, default=settings.PORTAL_LEASE_MAX_HOURS)
    hosts = list(
        Instance.objects.filter(
            status__in=Instance.LEASED,
            lease_expires_at__gt=now,
            lease_expires_at__lte=now + timedelta(hours=widest),
        )
        # A shared MIG host has no lease of its own: it ends when no slice uses it.
        .exclude(order__mig_host=True)
        .select_related("order", "order__job", "instance_type", "project", "owner", "pool")
    )
    sent = set(
        LeaseNotice.objects.filter(instance__in=[h.pk for h in hosts]).values_list(
            "instance_id", "lease_expires_at", "minutes_before"
        )
    )
    warned = []
    for host in hosts:
        if host.kept_for_its_job(now):
            continue  # its job's page says until when it is kept
        left = host.lease_expires_at - now
        due = next(
            (m for m in lease_warnings(host.lease_hours_total) if left <= timedelta(minutes=m)),
            None,
        )
        if due is None or (host.pk, host.lease_expires_at, due) in sent:
            continue
        try:
            with transaction.atomic():
                # An extension meanwhile moved the end: that end gets its own warnings.
                locked = Instance.objects.select_for_update().get(pk=host.pk)
                if locked.lease_expires_at != host.lease_expires_at:
                    continue
                LeaseNotice.objects.create(
                    instance=host, lease_expires_at=host.lease_expires_at, minutes_before=due
                )
                _warn(host, left)
                host_event(host, WebhookEvent.HOST_LEASE_WARNING)
        except IntegrityError:
            continue  # another pass sent this one first
        warned.append((str(host.pk), due))
    return warned


def _warn(host: Instance, left: timedelta) -> None:
    """Tell the owner what the lease's end does to this host (a notice and an email, a note on
    its timeline): a plain host is terminated, a pool's is replaced, a running job's ends with
    its job at the job's time limit."""
    name = f"{host.instance_type.name} in {host.project.slug}"
    if host.pool is not None:
        words = _pool_host_words(host, left, name)
    elif _job_limit_ahead(host, timezone.now()):
        words = _job_host_words(host, name)
    else:
        words = _host_words(host, left, name)
    subject, body, note, link = words
    notice_send(
        user=host.owner,
        subject=subject,
        body=body,
        link=link,
        topic=instance_topic(host, "lease"),
    )
    instance_note(
        instance=host,
        note=f"lease warning sent to {host.owner.username}: {note}",
        actor="system:lease",
    )


def _host_words(host: Instance, left: timedelta, name: str) -> tuple[str, str, str, str]:
    end = host.lease_expires_at
    longest, _ = longest_lease(project=host.project, user=host.owner)
    room = longest - host.lease_hours_total
    extend = (
        f"Extend it on the host's page (up to {room} h more) if you still need it; "
        if room > 0
        else "It cannot be extended further; "
    )
    return (
        f"Lease ends in {in_words(left)}: {name}",
        f"Your {name} host ({host.cloud_id or host.pk}) will be terminated at {_when(end)}, "
        f"when its {host.lease_hours_total} h lease ends. {extend}copy off any work you want "
        "to keep before then.",
        f"it ends at {_when(end)}",
        f"/hosts/{host.pk}/",
    )


def _job_host_words(host: Instance, name: str) -> tuple[str, str, str, str]:
    """A running job's host ends with its job, at the job's time limit (_job_limit_ahead)."""
    job = host.order.job
    limit = job.started_at + timedelta(minutes=job.time_limit_minutes)
    return (
        f"Job {job.name} reaches its time limit in {in_words(limit - timezone.now())}",
        f"Job {job.name} on your {name} host ({host.cloud_id or host.pk}) reaches its "
        f"{job.time_limit_minutes}-minute time limit at {_when(limit)}: if it still runs then, "
        "it fails and its host ends. Have it save a checkpoint before then; a job's time limit "
        "is set when it is submitted.",
        f"job {job.name} reaches its time limit at {_when(limit)}",
        f"/jobs/{job.pk}/",
    )


def _pool_host_words(host: Instance, left: timedelta, name: str) -> tuple[str, str, str, str]:
    """A pool host is not extended: its pool replaces it before its lease ends."""
    end, pool = host.lease_expires_at, host.pool
    lead = in_words(timedelta(seconds=settings.PORTAL_POOL_LEASE_HANDOVER_SECONDS))
    return (
        f"Pool {pool.name} replaces a host in {in_words(left)}: {name}",
        f"Your {name} host ({host.cloud_id or host.pk}) of pool {pool.name} reaches the "
        f"end of its {host.lease_hours_total} h lease at {_when(end)}. The pool launches its "
        f"replacement up to {lead} before and ends this host once the replacement runs; copy "
        "off any work you want to keep before then.",
        f"pool {pool.name} replaces it before {_when(end)}",
        f"/hosts/{host.pk}/",
    )


def leases_expire(*, now: datetime | None = None) -> list[str]:
    """Terminate hosts whose lease has ended; return their ids."""
    now = now or timezone.now()
    ended = (
        Instance.objects.filter(
            lease_expires_at__lte=now,
            status__in=[Instance.Status.RUNNING, Instance.Status.STOPPED, Instance.Status.STARTING],
        )
        .exclude(order__mig_host=True)
        .select_related("order", "order__job")
    )
    expired = []
    for instance in ended:
        if _job_limit_ahead(instance, now) or instance.kept_for_its_job(now):
            continue
        try:
            row, moved = instance_transition(
                instance=instance,
                to=Instance.Status.TERMINATING,
                reason=f"the {instance.lease_hours_total} h lease ended",
                actor="system:lease",
            )
        except IllegalTransition:
            continue  # it moved on meanwhile (a user terminated it, the cloud lost it)
        if moved:
            enqueue(ACTIONS["terminate"].task, str(row.pk))
            expired.append(str(row.pk))
    return expired


def _job_limit_ahead(instance: Instance, now: datetime) -> bool:
    """A live job's host whose job's time limit is still ahead: the lease is the limit in whole
    hours from the host's first run, the limit counts from the job's first run (handed a little
    later), so the lease may end first; the limit ends the job and its hosts instead (jobs_pass),
    and the lease does not cost the job a recovery on a new host moments before."""
    job = getattr(instance.order, "job", None)
    return (
        job is not None
        and not job.is_ended
        and job.started_at is not None
        and now < job.started_at + timedelta(minutes=job.time_limit_minutes)
    )


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
