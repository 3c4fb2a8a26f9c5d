"""instances/services/pools/schedules.py: a pool's scheduled actions. Add, change, remove, and
say them in words with their next runs (the autoscaler pass applies them)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.lib import cron
from instances.models import Pool, PoolEvent, PoolSchedule
from instances.services.pools.checks import SIZE_FIELDS, refuse, refuse_unknown
from instances.services.pools.lifecycle import lock_for_change, pool_event
from instances.services.transitions import actor_of
from portal.lib.errors import Conflict
from portal.models import User

K = PoolEvent.Kind


def _schedule_values(pool: Pool, values: dict) -> dict:
    errors: dict = {}
    try:
        parsed = cron.parse(values["cron"])
        values["cron"] = parsed.expression
    except ValidationError as error:
        errors["cron"] = error.error_list
        parsed = None
    try:
        tz = cron.zone(values["timezone"])
    except ValidationError as error:
        errors["timezone"] = error.error_list
        tz = None
    sizes = {name: values.get(name) for name in SIZE_FIELDS}
    if all(v is None for v in sizes.values()):
        refuse(errors, "desired", "Set at least one of min_size, max_size and desired.", "required")
    ceiling = pool.approved_max or pool.max_size
    for name, value in sizes.items():
        if value is not None and not 0 <= value <= ceiling:
            refuse(
                errors,
                name,
                f"{name} must be between 0 and {ceiling}, the most hosts approved for this pool.",
                "out_of_range",
            )
    low, want, high = sizes["min_size"], sizes["desired"], sizes["max_size"]
    if low is not None and high is not None and low > high:
        refuse(errors, "min_size", "min_size is more than max_size.", "min_above_max")
    if want is not None and (
        (low is not None and want < low) or (high is not None and want > high)
    ):
        refuse(errors, "desired", "desired is outside min_size..max_size.", "desired_out_of_range")
    upcoming = (
        cron.next_runs(parsed, tz, after=timezone.now(), count=1)
        if parsed is not None and tz is not None
        else []
    )
    if parsed is not None and tz is not None and not upcoming:
        refuse(errors, "cron", f"'{parsed.expression}' never fires.", "invalid_cron")
    if errors:
        raise ValidationError(errors)
    values["next_run_at"] = upcoming[0]
    return values


def schedule_create(
    *,
    pool: Pool,
    user: User,
    cron: str,
    timezone: str = "UTC",
    min_size: int | None = None,
    max_size: int | None = None,
    desired: int | None = None,
    enabled: bool = True,
) -> PoolSchedule:
    values = {
        "cron": cron,
        "timezone": timezone,
        "min_size": min_size,
        "max_size": max_size,
        "desired": desired,
    }
    with transaction.atomic():
        row = lock_for_change(pool, user)
        cap = settings.PORTAL_POOL_MAX_SCHEDULES
        if PoolSchedule.objects.filter(pool=row).count() >= cap:
            raise Conflict(
                f"Pool {row.name} has {cap} schedules, the most a pool may have; change or "
                "remove one instead of adding another.",
                code="too_many_schedules",
            )
        values = _schedule_values(row, values)
        schedule = PoolSchedule.objects.create(pool=row, enabled=enabled, created_by=user, **values)
        pool_event(
            row,
            K.CHANGED,
            f"{user.username} added schedule: {schedule_words(schedule)}",
            actor=actor_of(user),
        )
    return schedule


def schedule_update(*, schedule: PoolSchedule, user: User, **changes) -> PoolSchedule:
    allowed = {"cron", "timezone", *SIZE_FIELDS, "enabled"}
    refuse_unknown(changes, allowed)
    with transaction.atomic():
        row = lock_for_change(schedule.pool, user)
        current = PoolSchedule.objects.select_for_update().get(pk=schedule.pk)
        values = {name: getattr(current, name) for name in ("cron", "timezone", *SIZE_FIELDS)}
        values.update({k: v for k, v in changes.items() if k != "enabled"})
        values = _schedule_values(row, values)
        for name, value in values.items():
            setattr(current, name, value)
        if "enabled" in changes:
            current.enabled = bool(changes["enabled"])
        if "cron" in changes or "timezone" in changes or changes.get("enabled"):
            current.last_run_at = timezone.now()  # nothing fires retroactively
        else:
            current.next_run_at = _next_after(current, current.last_run_at)
        current.save()
        pool_event(
            row,
            K.CHANGED,
            f"{user.username} changed schedule: {schedule_words(current)}",
            actor=actor_of(user),
        )
    return current


def schedule_delete(*, schedule: PoolSchedule, user: User) -> None:
    with transaction.atomic():
        row = lock_for_change(schedule.pool, user)
        words = schedule_words(schedule)
        PoolSchedule.objects.filter(pk=schedule.pk).delete()
        pool_event(
            row, K.CHANGED, f"{user.username} removed schedule: {words}", actor=actor_of(user)
        )


def schedule_words(schedule: PoolSchedule) -> str:
    """'At 09:00, Monday through Friday (Asia/Shanghai): desired 8'."""
    sets = ", ".join(
        f"{name} {getattr(schedule, name)}"
        for name in SIZE_FIELDS
        if getattr(schedule, name) is not None
    )
    return f"{cron.describe(schedule.cron, schedule.timezone)}: {sets}"


def _next_after(schedule: PoolSchedule, after: datetime, *, count: int = 1) -> datetime | None:
    runs = _runs_after(schedule, after, count=count)
    return runs[0] if runs else None


def _runs_after(schedule: PoolSchedule, after: datetime, *, count: int) -> list[datetime]:
    try:
        return cron.next_runs(
            cron.parse(schedule.cron), cron.zone(schedule.timezone), after=after, count=count
        )
    except ValidationError:
        return []  # checked when saved; a zone retired since then just stops firing


def schedule_next_runs(schedule: PoolSchedule, *, count: int = 3) -> list[datetime]:
    """The next ``count`` runs from now: the cached next run, then the ones after it."""
    now = timezone.now()
    first = schedule.next_run_at
    if first is None or first <= now:
        return _runs_after(schedule, now, count=count)
    return [first, *_runs_after(schedule, first, count=count - 1)] if count > 1 else [first]


def schedules_fire(
    pool: Pool, schedules: list[PoolSchedule], now: datetime, events: list, *, actor: str
) -> list[PoolSchedule]:
    """Apply the scheduled actions whose time came since their last run (an autoscaler pass),
    in the order they were due: after a beat that was down for hours, the evening's "desired 0"
    lands after the morning's "desired 4" whichever schedule was made first. Each schedule fires
    once (its latest time); its event joins ``events``, for the caller to write. Changes the
    pool and the schedules in memory and returns the schedules it changed (fired, or their
    cached next run moved): a schedule whose cached next run is still ahead costs nothing."""
    due, changed = [], []
    for schedule in schedules:
        if schedule.next_run_at is not None and schedule.next_run_at > now:
            continue
        fired = _schedule_due(schedule, now)
        changed.append(schedule)
        if fired is not None:
            due.append((fired, schedule))
        else:
            schedule.next_run_at = _next_after(schedule, now)
    due.sort(key=lambda pair: (pair[0], pair[1].pk))
    for fired, schedule in due:
        _schedule_apply(pool, schedule, fired, now, events, actor)
    return changed


def _schedule_due(schedule: PoolSchedule, now: datetime) -> datetime | None:
    """The latest time the schedule names since its last run (at most a day back), or None."""
    try:
        parsed, tz = cron.parse(schedule.cron), cron.zone(schedule.timezone)
    except ValidationError:
        return None  # checked when saved; a zone retired since then just stops firing
    after = max(schedule.last_run_at, now - timedelta(days=1))
    return cron.last_fire(parsed, tz, after=after, until=now)


def _schedule_apply(
    pool: Pool, schedule: PoolSchedule, fired: datetime, now: datetime, events, actor: str
) -> None:
    schedule.last_run_at = now
    schedule.next_run_at = _next_after(schedule, now)
    if schedule.max_size is not None:
        pool.max_size = min(schedule.max_size, pool.approved_max or schedule.max_size)
    if schedule.min_size is not None:
        pool.min_size = schedule.min_size
    pool.min_size = min(pool.min_size, pool.max_size)
    want = schedule.desired if schedule.desired is not None else pool.desired
    old = pool.desired
    pool.desired = max(pool.min_size, min(pool.max_size, want))
    said = (
        f"{schedule_words(schedule)} (due {fired:%Y-%m-%d %H:%M} UTC): now "
        f"{pool.min_size}..{pool.max_size}, desired {pool.desired}"
    )
    event = pool_event(
        pool,
        PoolEvent.Kind.SCHEDULE,
        said,
        actor=actor,
        old=old,
        new=pool.desired,
        at=now,
        save=False,
    )
    events.append(event)
