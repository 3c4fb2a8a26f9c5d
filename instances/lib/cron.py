"""instances/lib/cron.py: the cron expressions of pool schedules. Parse them (Celery's crontab
parser), describe them in words (cron-descriptor), and find when they fire in an IANA time zone.

Times are matched on the zone's wall clock by cronsim, which jumps from one firing to the
next field by field (a cron that fires only on 29 February costs one step, not five years of
quarter hours; croniter would do as well, but cronsim is small, dependency-free and follows
Debian cron, as Healthchecks does). Daylight saving behaves as the zone says: a wall time the
spring change skips does not happen that day, and a wall time the autumn change repeats fires
once, the first time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from celery.schedules import ParseException, crontab_parser
from cron_descriptor import (
    ExpressionDescriptor,
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
)
from cronsim import CronSim, CronSimError
from django.core.exceptions import ValidationError

HORIZON = timedelta(days=5 * 366)
# A jump is one firing; the filter in _runs drops at most a few per change of offset.
MAX_JUMPS = 256
FIELDS = ("minute", "hour", "day of month", "month", "day of week")


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday, as cron counts
    any_day: bool
    any_weekday: bool

    def day_matches(self, moment: datetime) -> bool:
        """Cron's rule: when both day fields are restricted, either one matching is enough."""
        day = moment.day in self.days
        weekday = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day and weekday
        return day or weekday


@lru_cache(maxsize=4096)
def parse(expression: str) -> Cron:
    """Parse a cron expression or raise ValidationError (code ``invalid_cron``) naming the
    field that is wrong. Cached: a pass over a thousand pools parses a few distinct ones."""
    text = " ".join((expression or "").split())
    odd = next((ch for ch in text if not ch.isascii() or not ch.isprintable()), None)
    if odd is not None:
        # int() reads full-width and other Unicode digits: the field parsers would take them,
        # and the row would keep what no other cron reads.
        raise ValidationError(
            f"A cron expression is written in ASCII digits, letters and * , - /; "
            f"'{odd}' (U+{ord(odd):04X}) is not one of them: type it as e.g. '0 9 * * 1-5'.",
            code="invalid_cron",
        )
    parts = text.split(" ")
    if len(parts) != 5:
        raise ValidationError(
            f"A cron expression has five fields (minute hour day-of-month month day-of-week), "
            f"e.g. '0 9 * * 1-5'; '{text[:100]}' has {len(parts) if text else 0}.",
            code="invalid_cron",
        )
    parsers = (
        crontab_parser(60),
        crontab_parser(24),
        crontab_parser(31, 1),
        crontab_parser(12, 1),
        crontab_parser(8),  # 0-7: cron lets Sunday be 7 as well as 0
    )
    values = []
    for name, part, parser in zip(FIELDS, parts, parsers, strict=True):
        try:
            values.append(frozenset(parser.parse(part)))
        except (ValueError, ParseException, IndexError, KeyError) as error:
            raise ValidationError(
                f"The {name} field '{part[:40]}' of the cron expression is not valid: {error}",
                code="invalid_cron",
            ) from None
    weekdays = frozenset(d % 7 for d in values[4])
    return Cron(
        expression=text,
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=weekdays,
        any_day=parts[2] in ("*", "?"),
        any_weekday=parts[4] in ("*", "?"),
    )


def zone(name: str) -> ZoneInfo:
    """An IANA time zone by name, or ValidationError (code ``unknown_timezone``)."""
    if not name or name not in _zone_names():
        raise ValidationError(
            f"'{(name or '')[:64]}' is not an IANA time zone; use a name such as "
            "'Europe/Berlin', 'Asia/Shanghai' or 'UTC'.",
            code="unknown_timezone",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"'{name}' is not an IANA time zone.", code="unknown_timezone"
        ) from None


_ZONES: frozenset[str] | None = None
NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


def _zone_names() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        # available_timezones() lists the files of the system's zoneinfo folder, which holds
        # "localtime" (the machine's own zone, whatever it is) beside the IANA names, and
        # "Factory" (the IANA placeholder for "no zone set"): neither names a place.
        _ZONES = frozenset((available_timezones() | {"UTC"}) - NOT_PLACES)
    return _ZONES


def describe(expression: str, timezone_name: str) -> str:
    """'At 09:00, Monday through Friday (Asia/Shanghai)'."""
    options = Options()
    options.use_24hour_time_format = True
    options.day_of_week_start_index_zero = True
    try:
        words = ExpressionDescriptor(expression, options).get_description()
    except (FormatException, MissingFieldException, WrongArgumentException, ValueError):
        # Its own errors on what parse() accepted: fall back to the text.
        words = f"cron '{expression}'"
    return f"{words} ({timezone_name})"


def _runs(cron: Cron, tz: ZoneInfo, start: datetime, *, reverse: bool = False):
    """The UTC instants at which ``cron`` fires on ``tz``'s wall clock, from ``start`` on (or
    back, ``reverse``), one cronsim jump each. cronsim runs a wall time the spring change skips
    just after the change, and a repeated one in both hours when its minute is a range: this
    clock does neither (skipped: not that day; repeated: the first time only)."""
    try:
        moments = CronSim(cron.expression, start.astimezone(tz), reverse=reverse)
    except CronSimError:
        return
    for _ in range(MAX_JUMPS):
        try:
            local = next(moments)
        except (StopIteration, CronSimError):
            return
        if local.fold or local.hour not in cron.hours or local.minute not in cron.minutes:
            continue
        yield local.astimezone(UTC)


def last_fire(cron: Cron, tz: ZoneInfo, *, after: datetime, until: datetime) -> datetime | None:
    """The latest instant in (after, until] at which ``cron`` fires, or None: one jump back
    from ``until`` (two or three across a change of offset)."""
    # cronsim goes back from the minute before its start: start a minute after until's.
    start = until.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for moment in _runs(cron, tz, start, reverse=True):
        if moment <= until:
            return moment if moment > after else None
    return None


def next_runs(cron: Cron, tz: ZoneInfo, *, after: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` instants after ``after`` (looking at most five years ahead, which
    covers a 29 February), a jump each."""
    runs: list[datetime] = []
    horizon = after + HORIZON
    for moment in _runs(cron, tz, after):
        if moment > horizon:
            break
        if moment > after:
            runs.append(moment)
            if len(runs) == count:
                break
    return runs
