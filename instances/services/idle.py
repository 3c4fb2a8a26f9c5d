"""The idle stop: a running host whose GPUs stay below its project's threshold for the policy's
minutes is stopped (spot: terminated), after a warning its owner can answer with Keep running.

Unknown is not idle: a host without fresh readings covering the whole window is never warned,
and a warned host whose readings stop is not stopped. Every step is a timeline event and an
audit row by ``system:idle_stop``; one aggregate query per project with a policy per pass.
The policy itself (idle_policy_set) is written here too.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, F, Max, Min, Q
from django.urls import reverse
from django.utils import timezone

from instances.models import GpuReading, IdlePolicy, Instance
from instances.services.leases import in_words, instance_system_stop
from instances.services.transitions import actor_of, instance_note, instance_topic
from instances.services.webhooks import host_event
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User, WebhookEvent
from portal.services import notice_send, notices_close

log = logging.getLogger(__name__)

ACTOR = "system:idle_stop"
MINUTE = timedelta(minutes=1)
# Readings may miss a minute now and then (a late post, a restarted agent): the window counts
# as covered with this share of its minutes reported.
COVERAGE = 0.9


@dataclass
class IdleReport:
    warned: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)


def _hhmm(at: datetime) -> str:
    return f"{at:%H:%M} UTC"


def warn_after_minutes(policy: IdlePolicy) -> int:
    """How long a host is idle when its owner is warned (the rest of the policy's minutes are
    the warning)."""
    return max(1, policy.idle_minutes - policy.warning_minutes)


def idle_since(instance: Instance, policy: IdlePolicy) -> datetime:
    """Since when a running host has been idle: the end of the minute of its last busy reading,
    or its first reading, and never before it last began running (a host that ran 70 s was
    not idle for the policy's 2 minutes, whatever its first minute's reading covers)."""
    readings = GpuReading.objects.filter(
        instance_id=instance.pk, minute__gte=instance.status_changed_at - MINUTE
    ).aggregate(
        busy=Max("minute", filter=Q(utilization__gte=policy.threshold_percent)),
        first=Min("minute"),
    )
    began = readings["busy"] + MINUTE if readings["busy"] else readings["first"]
    return max(began or instance.status_changed_at, instance.status_changed_at)


def idle_check(*, now: datetime | None = None) -> IdleReport:
    """One pass of the idle stop over every project with an enabled policy."""
    now = now or timezone.now()
    report = IdleReport()
    _call_off_stale(report)
    for policy in IdlePolicy.objects.filter(enabled=True).select_related("project"):
        _check_project(policy, now, report)
    return report


def _call_off_stale(report: IdleReport) -> None:
    """Warnings that no longer apply: the host stopped or ended some other way (a later start
    must begin with a new warning, never stop at once on the old one), or its project's policy
    was turned off or removed."""
    Instance.objects.filter(idle_stop_at__isnull=False).exclude(
        status=Instance.Status.RUNNING
    ).update(idle_warned_at=None, idle_stop_at=None)
    orphaned = Instance.objects.filter(idle_stop_at__isnull=False).exclude(
        project__idle_policy__enabled=True
    )
    for instance_id, stop_at in orphaned.values_list("pk", "idle_stop_at"):
        if _clear(instance_id, stop_at, "Idle stop called off: the project's policy is off."):
            report.cleared.append(str(instance_id))


def idle_watched() -> Q:
    """The hosts a project's idle policy watches; idle_exemption says the same rule in words,
    host by host. A pool's hosts are not stopped one by one: its target tracking scales in idle
    ones. A job's host is not idle while its job lives (a data loader or a CPU step is work
    too): the job ends it when it ends, and its time limit bounds what it costs. MIG slices and
    their shared hosts are never stopped (a slice is given back; an empty shared host ends)."""
    return Q(pool__isnull=True, order__job__isnull=True, order__mig_profile__isnull=True)


def idle_exemption(instance: Instance) -> str | None:
    """Why the idle stop never stops ``instance``, as words that follow "never stopped for
    being idle: "; None when its project's policy watches it (idle_watched, the same rule)."""
    order = instance.order
    if instance.pool_id is not None:
        return "its pool scales in idle hosts instead"
    if order.mig_host:
        minutes = settings.PORTAL_MIG_HOST_EMPTY_MINUTES
        return f"a shared MIG host ends once no slice has used it for {minutes} minutes"
    if order.mig_profile_id is not None:
        return "a MIG slice is given back, never stopped"
    if hasattr(order, "job"):
        return "its job ends it when the job ends, within the job's time limit"
    return None


def _check_project(policy: IdlePolicy, now: datetime, report: IdleReport) -> None:
    idle_for = warn_after_minutes(policy)
    window_start = now - idle_for * MINUTE
    fresh_after = now - settings.PORTAL_TELEMETRY_FRESH_MINUTES * MINUTE
    hosts = (
        Instance.objects.filter(project_id=policy.project_id, status=Instance.Status.RUNNING)
        .filter(idle_watched())
        .exclude(idle_snoozed_until__gt=now)
    )
    since_warning = Q(minute__gte=F("instance__idle_warned_at") - MINUTE)
    stats = (
        GpuReading.objects.filter(
            instance__in=hosts,
            minute__gte=now - (policy.idle_minutes + policy.warning_minutes) * MINUTE,
        )
        .values("instance_id", "instance__idle_stop_at")
        .annotate(
            covered=Count("id", filter=Q(minute__gt=window_start)),
            peak=Max("utilization", filter=Q(minute__gt=window_start)),
            peak_since_warning=Max("utilization", filter=since_warning),
            latest=Max("minute"),
            first=Min("minute"),
        )
    )
    seen = set()
    for row in stats:
        instance_id, stop_at = row["instance_id"], row["instance__idle_stop_at"]
        seen.add(instance_id)
        fresh = row["latest"] >= fresh_after
        if stop_at is None:
            idle = (
                fresh
                # Readings reach back to the window's start: the host has been watched (and
                # idle) for the whole window, not just since it booted or its agent started.
                and row["first"] <= window_start + MINUTE
                and row["covered"] >= math.floor(idle_for * COVERAGE)
                and row["peak"] is not None
                and row["peak"] < policy.threshold_percent
            )
            if idle and _warn(instance_id, policy, now):
                report.warned.append(str(instance_id))
            continue
        busy = (row["peak_since_warning"] or 0) >= policy.threshold_percent
        if busy or not fresh:
            why = (
                "its GPUs are busy again"
                if busy
                else "its GPU readings stopped coming (unknown is not idle)"
            )
            if _clear(instance_id, stop_at, f"Idle stop called off: {why}."):
                report.cleared.append(str(instance_id))
        elif now >= stop_at and _stop(instance_id, stop_at, policy):
            report.stopped.append(str(instance_id))
    # A warned host with no readings at all in the window: unknown, so not stopped.
    for instance_id, stop_at in hosts.filter(idle_stop_at__isnull=False).values_list(
        "pk", "idle_stop_at"
    ):
        if instance_id not in seen and _clear(
            instance_id, stop_at, "Idle stop called off: its GPU readings stopped coming."
        ):
            report.cleared.append(str(instance_id))


def _warn(instance_id, policy: IdlePolicy, now: datetime) -> bool:
    # The stop is announced for a whole minute, and happens at the first pass from then on.
    stop_at = (now + policy.warning_minutes * MINUTE).replace(second=0, microsecond=0)
    if stop_at < now + policy.warning_minutes * MINUTE:
        stop_at += MINUTE
    with transaction.atomic():
        # Conditional: two passes at once warn once.
        claimed = Instance.objects.filter(
            pk=instance_id, status=Instance.Status.RUNNING, idle_stop_at__isnull=True
        ).update(idle_warned_at=now, idle_stop_at=stop_at)
        if not claimed:
            return False
        instance = Instance.objects.select_related("instance_type", "owner").get(pk=instance_id)
        idle_for = in_words(now - idle_since(instance, policy))
        verb = (
            "stopped" if instance.market == "on_demand" else "terminated (spot hosts cannot stop)"
        )
        text = (
            f"Your host {instance.instance_type.name} {str(instance.pk)[:8]} has been idle for "
            f"{idle_for} (GPU below {policy.threshold_percent} %) and will be {verb} at "
            f"{_hhmm(stop_at)}."
        )
        instance_note(instance=instance, note=f"Idle warning: {text}", actor=ACTOR)
        link = reverse("host", args=[instance.pk]) + "#keep-running"
        notice_send(
            user=instance.owner,
            subject=f"Idle host {instance.instance_type.name} will be {verb.split(' ')[0]} at "
            f"{_hhmm(stop_at)}",
            body=f"{text} Press Keep running to keep it for another {policy.snooze_hours} h.",
            link=link,
            action=("Keep running", reverse("host-keep-running", args=[instance.pk])),
            action_until=stop_at,
            topic=instance_topic(instance, "idle"),
        )
        host_event(instance, WebhookEvent.HOST_IDLE_WARNING)
    return True


def _clear(instance_id, stop_at: datetime, note: str) -> bool:
    with transaction.atomic():
        claimed = Instance.objects.filter(pk=instance_id, idle_stop_at=stop_at).update(
            idle_warned_at=None, idle_stop_at=None
        )
        if claimed:
            instance_note(instance=Instance.objects.get(pk=instance_id), note=note, actor=ACTOR)
    return bool(claimed)


def _stop(instance_id, stop_at: datetime, policy: IdlePolicy) -> bool:
    with transaction.atomic():
        claimed = Instance.objects.filter(
            pk=instance_id, idle_stop_at=stop_at, status=Instance.Status.RUNNING
        ).update(idle_warned_at=None, idle_stop_at=None)
        if not claimed:
            return False
        instance_system_stop(
            instance=Instance.objects.get(pk=instance_id),
            reason=f"idle: GPU below {policy.threshold_percent} % for {policy.idle_minutes} "
            f"minutes (announced for {_hhmm(stop_at)})",
            actor=ACTOR,
        )
    return True


def instance_keep_running(
    *, instance: Instance, user: User, now: datetime | None = None
) -> Instance:
    """Hold off the idle stop for the project's snooze hours (the answer to the warning; it
    may also be pressed before one)."""
    now = now or timezone.now()
    if not permissions.can_keep_running(user, instance):
        raise Forbidden("You can see this host but not keep it running; ask its owner.")
    exemption = idle_exemption(instance)
    if exemption:
        raise Conflict(
            f"This host is never stopped for being idle: {exemption}.", code="idle_exempt"
        )
    policy = IdlePolicy.objects.filter(project_id=instance.project_id, enabled=True).first()
    if policy is None:
        raise Conflict(
            f"Project {instance.project.slug} has no idle stop: this host is never stopped for "
            "being idle.",
            code="no_idle_policy",
        )
    with transaction.atomic():
        row = Instance.objects.select_for_update().get(pk=instance.pk)
        if row.status != Instance.Status.RUNNING:
            raise Conflict(
                f"This host is {row.get_status_display().lower()}; only a running host can be "
                "kept running.",
                code="invalid_state",
            )
        until = now + timedelta(hours=policy.snooze_hours)
        row.idle_snoozed_until = until
        row.idle_warned_at = None
        row.idle_stop_at = None
        row.save(update_fields=["idle_snoozed_until", "idle_warned_at", "idle_stop_at"])
        instance_note(
            instance=row,
            note=f"Keep running: no idle stop until {until:%b %-d, %H:%M} UTC "
            f"({policy.snooze_hours} h), asked by {user.username}.",
            actor=actor_of(user),
        )
        notices_close(topic=instance_topic(row, "idle"), reason=f"Kept running by {user.username}.")
    return row


# --- the idle policy ------------------------------------------------------------------------

IDLE_POLICY_FIELDS = (
    "enabled",
    "threshold_percent",
    "idle_minutes",
    "warning_minutes",
    "snooze_hours",
)
WEEK_MINUTES = 7 * 24 * 60
# Each number's range, the one rule idle_policy_set checks (the API's schema states it from
# here). The warning must also come before the stop: checked against idle_minutes below.
IDLE_POLICY_BOUNDS = {
    "threshold_percent": (1, 100),
    "idle_minutes": (2, WEEK_MINUTES),
    "warning_minutes": (1, WEEK_MINUTES - 1),
    "snooze_hours": (1, 168),
}


@transaction.atomic
def idle_policy_set(*, project: Project, actor: User, **values) -> IdlePolicy:
    """Set when the project's hosts count as idle and are stopped (instances enforces it)."""
    if not permissions.can_set_idle_policy(actor, project):
        raise Forbidden("Only admins and the project's managers change its idle stop.")
    policy = IdlePolicy.objects.select_for_update().filter(project=project).first()
    policy = policy or IdlePolicy(project=project)
    for name in IDLE_POLICY_FIELDS:
        if name in values:
            setattr(policy, name, values[name])
    # Named by field, so that a page says each beside its input (the API lists them by field).
    problems = {}

    def outside(name: str) -> bool:
        low, high = IDLE_POLICY_BOUNDS[name]
        return not low <= getattr(policy, name) <= high

    def bounds(name: str) -> str:
        return "{} to {}".format(*IDLE_POLICY_BOUNDS[name])

    if outside("threshold_percent"):
        problems["threshold_percent"] = (
            f"The threshold is a GPU utilization from {bounds('threshold_percent')} %."
        )
    if outside("idle_minutes"):
        problems["idle_minutes"] = (
            f"The idle time is {bounds('idle_minutes')} minutes (up to a week)."
        )
    elif outside("warning_minutes") or policy.warning_minutes >= policy.idle_minutes:
        problems["warning_minutes"] = (
            "The warning comes at least a minute before the stop, within the idle time."
        )
    if outside("snooze_hours"):
        problems["snooze_hours"] = f"Keep running holds a host from {bounds('snooze_hours')} hours."
    if problems:
        raise ValidationError(problems, code="invalid")
    policy.updated_by = actor
    policy.save()
    return policy
